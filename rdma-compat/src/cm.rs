//! `rdma_*`: librdmacm's connection manager over the engine's MPA connection manager.
//!
//! - An `rdma_event_channel` is a queue of events and a socket pair: one token, there while
//!   the queue holds any event, makes `fd` readable while an event waits (`poll()` users),
//!   and `rdma_get_cm_event` reads it (blocking, unless the application made `fd`
//!   non-blocking: then `EAGAIN`), takes the event and puts it back if more wait. (A token
//!   per event filled the socket after a few hundred unread events and blocked the poster.)
//! - The dispatcher thread (`start_dispatcher`) sleeps on the engine's CM event channel
//!   and queues each event on the channel of the id it belongs to: a connection request on
//!   the listening id's channel with a new child id, the rest on the id whose QP it names.
//!   Address and route resolution are immediate (one Ethernet segment or a gateway: ARP
//!   runs when the connection starts), so those events are queued by the calls themselves.
//! - A synchronous id (`rdma_create_id` with no channel, `rdma_create_ep`) has a private
//!   channel, and each call that would queue an event waits for it instead, as librdmacm
//!   does.
//!
//! IRD and ORD: `rdma_connect`'s `responder_resources` and `initiator_depth` become the
//! IRD and ORD we offer (MPA Rev 2) or use (Rev 1); a CONNECT_REQUEST reports the peer's
//! from the listener's side (`request_conn_values`), an ESTABLISHED ours the way siw and
//! irdma report them (`established_conn_values`).

use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use warpcore_verbs as wv;
use wv::{CmEvent, ConnectRequest, QpId};

use crate::sys::*;
use crate::verbs::{self, qp_ref};
use crate::{
    engine, errno_of, guard, set_errno, EADDRINUSE, EADDRNOTAVAIL, EAFNOSUPPORT, ECONNREFUSED,
    ECONNRESET, EHOSTUNREACH, EINVAL, ENETUNREACH, ENODEV, ENOSYS, EOPNOTSUPP, ETIMEDOUT,
};

const EPROTO: c_int = 71;

const AF_INET: u16 = 2;
const MSG_DONTWAIT: c_int = 0x40;
const MSG_PEEK: c_int = 0x2;

extern "C" {
    fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
}

/// An event channel: the public struct first.
#[repr(C)]
pub(crate) struct Chan {
    ch: rdma_event_channel,
    q: Mutex<VecDeque<usize>>,
    tx: UnixStream,
    rx: UnixStream,
    /// The ids on this channel, and [`CHAN_CLOSED`] once the application destroyed it (or
    /// the synchronous id whose private channel it is let it go): it is freed when both
    /// hold, by whichever of [`chan_close`] and [`chan_leave`] makes them hold, once.
    /// `rdma_destroy_event_channel` before the channel's ids (which rdma_destroy_event_channel(3)
    /// asks the application not to do) then leaves the channel to its ids instead of
    /// freeing it under them: the dispatcher queues their events on it, and a freed one
    /// made it wait on freed memory while it held the registry, which stopped every later
    /// `rdma_*` call of the process.
    state: AtomicUsize,
}

/// [`Chan::state`]'s bit for a channel no longer the application's.
const CHAN_CLOSED: usize = 1 << (usize::BITS - 1);

/// An id joins channel `ch` (its own, or one it moves to).
fn chan_join(ch: *mut rdma_event_channel) {
    // SAFETY: ch is NULL or a channel of ours that is still open or still has ids (an id
    // joins the channel it was created on or moves to, which the caller holds).
    if let Some(c) = unsafe { ch.cast::<Chan>().as_ref() } {
        c.state.fetch_add(1, Ordering::AcqRel);
    }
}

/// An id leaves channel `ch` (destroyed, or moved elsewhere): the last id of a closed
/// channel frees it.
fn chan_leave(ch: *mut rdma_event_channel) {
    // SAFETY: as in chan_join: the id leaving holds the channel until this call.
    let Some(c) = (unsafe { ch.cast::<Chan>().as_ref() }) else {
        return;
    };
    if c.state.fetch_sub(1, Ordering::AcqRel) == CHAN_CLOSED | 1 {
        // SAFETY: closed and without ids: nobody refers to the channel any more.
        unsafe { chan_free(ch) };
    }
}

/// The application (or a synchronous id) lets channel `ch` go: freed now if no id is on
/// it, else by its last id's [`chan_leave`].
fn chan_close(ch: *mut rdma_event_channel) {
    // SAFETY: ch is NULL or a channel of ours not closed before.
    let Some(c) = (unsafe { ch.cast::<Chan>().as_ref() }) else {
        return;
    };
    if c.state.fetch_or(CHAN_CLOSED, Ordering::AcqRel) == 0 {
        // SAFETY: no id on it, and closed now: nobody else refers to it.
        unsafe { chan_free(ch) };
    }
}

/// Frees channel `ch` and the events still queued on it.
///
/// # Safety
/// `ch` is a channel of ours that nothing refers to any more.
unsafe fn chan_free(ch: *mut rdma_event_channel) {
    // SAFETY: per the contract.
    let c = unsafe { Box::from_raw(ch.cast::<Chan>()) };
    for e in c.q.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        // SAFETY: queued events are ours and unacknowledged.
        drop(unsafe { Box::from_raw(e as *mut Ev) });
    }
}

impl Chan {
    /// A new channel, or the errno of the socket pair the system refused (EMFILE,
    /// ENFILE, ENOMEM), as librdmacm's `rdma_create_event_channel` leaves its `open`'s
    /// errno (it was ENOMEM whatever the cause).
    fn new() -> Result<*mut Chan, c_int> {
        let (tx, rx) = UnixStream::pair()
            .map_err(|e| e.raw_os_error().filter(|&e| e > 0).unwrap_or(crate::ENOMEM))?;
        let b = Box::new(Chan {
            ch: rdma_event_channel { fd: rx.as_raw_fd() },
            q: Mutex::default(),
            tx,
            rx,
            state: AtomicUsize::new(0),
        });
        Ok(Box::into_raw(b))
    }

    /// Queues an event. The descriptor holds one token while the queue holds any event
    /// (not one per event: a socket holds a few hundred one-octet writes, and a writer
    /// beyond them would block until the application reads, which an application that
    /// starts hundreds of resolutions before it reads their events never does).
    fn post(&self, ev: *mut Ev) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(ev as usize);
        self.settle(&q);
    }

    /// Writes the token (under the queue's lock).
    fn token(&self) {
        let _ = std::io::Write::write(&mut &self.tx, &[1]);
    }

    /// Leaves the token in the socket exactly if `q`, the locked queue, holds an event:
    /// writes it if the queue holds one and the socket none, reads it back if the queue is
    /// empty. Judged from what the socket holds (a peek), not from what the queue's length
    /// implies: a reader reads its token outside the lock ([`Self::read_token`]), so a
    /// purge that emptied the queue meanwhile found no token to take back, a post after
    /// it wrote one (the queue held one event again), and the reader's pop of that event
    /// left it behind with the queue empty. The descriptor then read readable with no
    /// event (for good: each later event brought one token more), and a program that
    /// polls the descriptor and then calls `rdma_get_cm_event` blocked in that call.
    fn settle(&self, q: &VecDeque<usize>) {
        let fd = self.rx.as_raw_fd();
        let mut tok = 0u8;
        if q.is_empty() {
            // SAFETY: recv(2) into one octet of ours, on our socket, without waiting (the
            // descriptor's own mode is the application's).
            unsafe { recv(fd, (&raw mut tok).cast(), 1, MSG_DONTWAIT) };
        } else {
            // SAFETY: as above, the octet left in the socket (MSG_PEEK).
            let there = unsafe { recv(fd, (&raw mut tok).cast(), 1, MSG_DONTWAIT | MSG_PEEK) };
            if there != 1 {
                self.token();
            }
        }
    }

    /// Takes the queued events of `id` out of the queue (those naming it as their id, and
    /// for a listener the connection requests naming it as their `listen_id`), and the
    /// token if the queue is left empty, so that none is handed out once the id is freed
    /// (rdma_destroy_id(3) cancels what is outstanding).
    fn purge(&self, id: *mut rdma_cm_id) -> Vec<*mut Ev> {
        self.purge_then(id, || ()).0
    }

    /// [`Self::purge`], and `then`'s answer, asked while the queue is still locked (no
    /// event of the id is taken by another thread in between).
    fn purge_then<T>(&self, id: *mut rdma_cm_id, then: impl FnOnce() -> T) -> (Vec<*mut Ev>, T) {
        self.take_where_then(|ev| ev.id == id || ev.listen_id == id, then)
    }

    /// The queued events `pred` picks, counted without taking them (under the queue's
    /// lock, as the dispatcher's next post).
    fn count_where(&self, mut pred: impl FnMut(&rdma_cm_event) -> bool) -> usize {
        let q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        q.iter()
            // SAFETY: a queued event is ours and live until taken.
            .filter(|&&e| pred(unsafe { &(*(e as *mut Ev)).ev }))
            .count()
    }

    /// Takes the queued events `pred` picks out of the queue, and the token if the queue
    /// is left empty ([`Self::purge`]).
    fn take_where(&self, pred: impl FnMut(&rdma_cm_event) -> bool) -> Vec<*mut Ev> {
        self.take_where_then(pred, || ()).0
    }

    /// [`Self::take_where`], and `then`'s answer, asked before the queue's lock is let go.
    fn take_where_then<T>(
        &self,
        mut pred: impl FnMut(&rdma_cm_event) -> bool,
        then: impl FnOnce() -> T,
    ) -> (Vec<*mut Ev>, T) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        q.retain(|&e| {
            // SAFETY: a queued event is ours and live until taken.
            let ev = unsafe { &(*(e as *mut Ev)).ev };
            let mine = pred(ev);
            if mine {
                out.push(e as *mut Ev);
            }
            !mine
        });
        if !out.is_empty() {
            // A reader that holds the token already finds the queue empty and reads again,
            // as after any token without an event.
            self.settle(&q);
        }
        let t = then();
        drop(q);
        (out, t)
    }

    /// The next event, blocking unless the descriptor is non-blocking.
    fn take(&self) -> Result<*mut Ev, c_int> {
        self.take_then(|_| {})
    }

    /// [`Self::take`] for `rdma_get_cm_event`: the event is counted against its id
    /// ([`IdState::unacked`]) before the queue's lock is let go. `rdma_destroy_id` on
    /// another thread purges the id's queued events under that lock and then waits for
    /// the count: counted after the lock (as it was), an event just taken was in neither,
    /// and the id could be freed under the thread about to count it (librdmacm counts the
    /// events the kernel reported, `events_reported`, in the same way).
    fn take_counted(&self) -> Result<*mut Ev, c_int> {
        self.take_then(|e| {
            // SAFETY: a queued event is ours; its ids are live (a destroyed id's events
            // are purged from the queue, under the lock held here, before it is freed).
            let ev = unsafe { &(*e).ev };
            // SAFETY: as above.
            if let Some(i) = unsafe { id_ref(counted_id(ev)) } {
                i.lock().unacked += 1;
            }
        })
    }

    /// The next event, blocking unless the descriptor is non-blocking, given to `taken`
    /// while the queue is still locked.
    fn take_then(&self, mut taken: impl FnMut(*mut Ev)) -> Result<*mut Ev, c_int> {
        loop {
            self.read_token()?;
            if let Some(e) = self.pop_after_token(&mut taken) {
                return Ok(e);
            }
        }
    }

    /// Waits for the token and reads it (outside the queue's lock: the wait may be long).
    fn read_token(&self) -> Result<(), c_int> {
        loop {
            let mut tok = [0u8; 1];
            match std::io::Read::read(&mut &self.rx, &mut tok) {
                Ok(1) => return Ok(()),
                // The channel was destroyed while this thread waited in it (the application
                // does that on exit, its CM thread still blocked): librdmacm's read would
                // never return either, so neither does this (the memory is gone; nothing
                // of it is touched again).
                Ok(_) => loop {
                    std::thread::park();
                },
                // The same, when the descriptor was closed before this read began (EBADF):
                // rping's CM thread loops back into rdma_get_cm_event while its main thread
                // destroys the channel on exit; an error here made rping exit 255 after a
                // clean run (seen in the suite and against siw).
                Err(e) if e.raw_os_error() == Some(crate::EBADF) => loop {
                    std::thread::park();
                },
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(crate::EAGAIN),
                Err(_) => return Err(crate::EIO),
            }
        }
    }

    /// After [`Self::read_token`]: the oldest event, given to `taken` under the queue's
    /// lock, or `None` if the queue is empty (another path took what the token stood for).
    fn pop_after_token(&self, taken: &mut impl FnMut(*mut Ev)) -> Option<*mut Ev> {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let e = q.pop_front()?;
        // More wait: the token goes back for the next reader (and none is left behind if
        // none does).
        self.settle(&q);
        taken(e as *mut Ev);
        Some(e as *mut Ev)
    }
}

/// An event: the public struct first, then what its pointers point into.
#[repr(C)]
struct Ev {
    ev: rdma_cm_event,
    pdata: Vec<u8>,
}

fn new_event(
    id: *mut rdma_cm_id,
    listen: *mut rdma_cm_id,
    kind: rdma_cm_event_type,
    status: c_int,
    pdata: &[u8],
    resp_init: (u16, u16),
) -> *mut Ev {
    let mut b = Box::new(Ev {
        ev: rdma_cm_event {
            id,
            listen_id: listen,
            event: kind,
            status,
            ..Default::default()
        },
        pdata: pdata.to_vec(),
    });
    let conn = rdma_conn_param {
        private_data: if b.pdata.is_empty() {
            std::ptr::null()
        } else {
            b.pdata.as_ptr().cast()
        },
        private_data_len: b.pdata.len().min(255) as u8,
        responder_resources: resp_init.0.min(255) as u8,
        initiator_depth: resp_init.1.min(255) as u8,
        ..Default::default()
    };
    b.ev.param.conn = conn;
    Box::into_raw(b)
}

/// What an id is doing.
#[derive(Default)]
struct IdState {
    /// Our port (bound, listening, the child's listener's, or the one `rdma_resolve_addr`
    /// gave an active id).
    port: u16,
    /// The port this id holds in [`Registry::held`] (an active id's, from
    /// `rdma_resolve_addr`, or one `rdma_bind_addr` bound), given back by `rdma_destroy_id`.
    held: Option<u16>,
    /// `rdma_bind_addr` bound the id (to a port or to port 0): it binds no more.
    bound: bool,
    /// `RDMA_OPTION_ID_REUSEADDR` is set: `rdma_bind_addr` may share a port other ids
    /// are bound to (not one a listener has).
    reuseaddr: bool,
    /// The peer, once resolved or connected.
    dst: Option<SocketAddrV4>,
    /// A child id: the request it answers.
    request: Option<ConnectRequest>,
    listening: bool,
    /// A listener's backlog: the most connection requests whose CONNECT_REQUEST waits in
    /// its channel, not yet taken by `rdma_get_cm_event` (`rdma_listen`'s, as the kernel's
    /// ucma counts it).
    backlog: usize,
    /// The engine QP this id's events follow.
    qp: Option<QpId>,
    established: bool,
    /// The send and the receive CQ (each with its channel) were made by `rdma_create_qp`.
    own_cqs: (bool, bool),
    /// The private channel of a synchronous id.
    sync: bool,
    /// `rdma_create_ep` on a passive id: the QP attributes for `rdma_get_request`'s children.
    ep_attr: Option<ibv_qp_init_attr>,
    /// Events of this id ([`counted_id`]) that `rdma_get_cm_event` handed out and
    /// `rdma_ack_cm_event` has not taken back: `rdma_destroy_id` waits for them, as
    /// librdmacm's does (rdma_ack_cm_event(3)).
    unacked: usize,
    /// How many of those `rdma_ack_cm_event` has taken back, ever: `rdma_migrate_id` waits
    /// until it reaches what was handed out when the id moved (librdmacm's
    /// `events_completed` against the kernel's `events_reported`).
    acked: u64,
    /// `rdma_connect` or `rdma_accept` started a connection: the kernel's rdma_cm would
    /// have an iWARP CM id for it, without which `rdma_disconnect` is `EINVAL` and
    /// `rdma_init_qp_attr` reports an unconnected id's attributes.
    started: bool,
    /// A synchronous id took the event that ended its connection (DISCONNECTED, or the
    /// failure of `rdma_connect`/`rdma_accept`): `rdma_disconnect` has none left to wait for.
    ended: bool,
}

/// An rdma_cm id. The application, its threads' calls and the dispatcher thread share it,
/// so after its creation it is only ever reached through `&Id` (a `&mut Id` held across a
/// call's wait asserted that no other thread touched the id, while the dispatcher and
/// `rdma_ack_cm_event` did, through its lock and fields), and the application's
/// `struct rdma_cm_id` is read and written a field at a time through a raw pointer
/// ([`get!`], [`set!`]), never through a reference to the whole of it, as librdmacm's C
/// does.
#[repr(C)]
pub(crate) struct Id {
    /// First, so the pointer the application holds is the id's.
    cm: UnsafeCell<rdma_cm_id>,
    st: Mutex<IdState>,
}

/// Reads a field of an id's `struct rdma_cm_id` (`get!(id.qp)`, `get!(id.route.addr...)`).
macro_rules! get {
    ($id:ident . $($f:ident).+) => {{
        let p = $id.cm.get();
        // (`get!` is also used inside callers' unsafe blocks.)
        #[allow(unused_unsafe)]
        // SAFETY: `$id` is a live `&Id`, so its `rdma_cm_id` is too; the field is read by
        // value through the cell's raw pointer, with no reference to the struct that
        // another thread's access could alias (a union field read here is one the id's
        // code wrote: the addresses are always `sockaddr_in`).
        let v = unsafe { (*p).$($f).+ };
        v
    }};
}

/// Writes a field of an id's `struct rdma_cm_id` (`set!(id.qp = qp)`).
macro_rules! set {
    ($id:ident . $($f:ident).+ = $v:expr) => {{
        let v = $v;
        let p = $id.cm.get();
        // SAFETY: as in `get!`: one field written through the cell's raw pointer.
        unsafe { (*p).$($f).+ = v }
    }};
}

/// # Safety
/// `p` is NULL or an id of ours.
unsafe fn id_ref<'a>(p: *mut rdma_cm_id) -> Option<&'a Id> {
    // SAFETY: per the contract.
    unsafe { p.cast::<Id>().as_ref() }
}

fn chan_of(id: &Id) -> Option<&Chan> {
    // SAFETY: an id's channel outlives it: the id is counted on it (`chan_join`) until
    // rdma_destroy_id or rdma_migrate_id takes it off (`chan_leave`).
    unsafe { get!(id.channel).cast::<Chan>().as_ref() }
}

impl Id {
    fn lock(&self) -> std::sync::MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The id an event is counted against until it is acknowledged (the one `rdma_destroy_id`
/// waits for): a connection request's listener, any other event's own id. As in
/// librdmacm, a CONNECT_REQUEST is not the new id's event: the application may reject and
/// destroy the new id before it acknowledges the request (a wait on the new id would never
/// end), and the acknowledgement then touches only the listener.
fn counted_id(ev: &rdma_cm_event) -> *mut rdma_cm_id {
    if ev.event == RDMA_CM_EVENT_CONNECT_REQUEST {
        ev.listen_id
    } else {
        ev.id
    }
}

/// Ids the dispatcher routes to: listeners by port, connections by QP. Pointers as usize.
#[derive(Default)]
struct Registry {
    listeners: HashMap<u16, usize>,
    /// The ports active ids connect from (`rdma_resolve_addr` gave them or they were bound),
    /// each with how many ids hold it: an ephemeral port is chosen among the others.
    held: HashMap<u16, usize>,
    qps: HashMap<QpId, usize>,
    /// The next-hop resolutions `rdma_resolve_addr` started, by the engine's handle, and
    /// the id each answers (ADDR_RESOLVED or ADDR_ERROR).
    /// Each id's deadline too: its `timeout_ms` from the call, on the process's clock.
    resolving: HashMap<wv::NeighborId, (usize, std::time::Instant)>,
    /// The connection requests the dispatcher made a new id for and nobody answered yet,
    /// by that id (pointer as usize): reported to the application (or still queued, unread,
    /// in its listener's channel) and neither accepted (`rdma_accept` started the
    /// connection), rejected, nor refused by `rdma_destroy_id`. What the process's normal
    /// exit refuses ([`refuse_requests_at_exit`]).
    unanswered: HashMap<usize, ConnectRequest>,
    /// Set by the process's normal exit ([`refuse_requests_at_exit`]), which unlistened
    /// every port: a connection request the dispatcher takes from the engine after it (the
    /// engine reported it before the unlisten reached its core) is refused at once, not
    /// handed to a listener nobody will read again.
    exiting: bool,
}

/// The ephemeral ports: those the kernel's rdma_cm and Warpcore's TCP take theirs from
/// (IANA's dynamic range).
const EPHEMERAL: std::ops::RangeInclusive<u16> = 49152..=65535;

impl Registry {
    /// Whether `port` is taken: a listener's, or an active id's.
    fn port_taken(&self, port: u16) -> bool {
        self.listeners.contains_key(&port) || self.held.contains_key(&port)
    }

    /// An ephemeral port no listener and no active id of the process has, for an active
    /// id (`rdma_resolve_addr` of an unbound id, as the kernel's rdma_cm binds one there).
    /// Taken in turn from a cursor that starts at a point drawn from the process id and
    /// the clock, as the kernel draws its ports at random: a port given back is not taken
    /// again at once (its last connection may still be in TIME-WAIT at the peer, or in
    /// ours), nor by the next run of the program.
    fn ephemeral_port(&self) -> Option<u16> {
        static CURSOR: OnceLock<std::sync::atomic::AtomicU32> = OnceLock::new();
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let cursor = CURSOR.get_or_init(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            std::sync::atomic::AtomicU32::new(std::process::id().wrapping_mul(7919) ^ t)
        });
        (0..span)
            .map(|_| {
                let k = cursor.fetch_add(1, Ordering::Relaxed) % span;
                EPHEMERAL.start() + k as u16
            })
            .find(|p| !self.port_taken(*p))
    }

    /// Takes `port` for an active id.
    fn hold(&mut self, port: u16) {
        *self.held.entry(port).or_default() += 1;
    }

    /// Gives back a port [`Self::hold`] took.
    fn release(&mut self, port: u16) {
        if let Some(n) = self.held.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&port);
            }
        }
    }
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Forgets a QP the application destroys (its events have no id to go to).
pub(crate) fn forget_qp(qp: *mut ibv_qp) {
    // SAFETY: qp is a live QP of ours (called before it is freed).
    if let Some(q) = unsafe { qp_ref(qp) } {
        registry().qps.remove(&q.qp.id());
    }
}

fn sin(addr: SocketAddrV4) -> sockaddr_in {
    sockaddr_in {
        sin_family: AF_INET,
        sin_port: addr.port().to_be(),
        sin_addr: in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// # Safety
/// `sa` is NULL or a socket address of the length its family implies.
unsafe fn from_sockaddr(sa: *const sockaddr) -> Result<Option<SocketAddrV4>, c_int> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract; sa_family is first in every sockaddr.
    let fam = unsafe { (*sa).sa_family };
    if fam != AF_INET {
        return Err(EAFNOSUPPORT);
    }
    // SAFETY: an AF_INET address is a sockaddr_in.
    let s = unsafe { &*sa.cast::<sockaddr_in>() };
    Ok(Some(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )))
}

fn set_src(id: &Id, a: SocketAddrV4) {
    set!(id.route.addr.__bindgen_anon_1.src_sin = sin(a));
}

fn set_dst(id: &Id, a: SocketAddrV4) {
    set!(id.route.addr.__bindgen_anon_2.dst_sin = sin(a));
}

fn fail<T>(e: c_int, v: T) -> T {
    set_errno(e);
    v
}

// ---------------------------------------------------------------- dispatcher

/// Starts the thread that routes the engine's CM events to the ids' channels.
pub(crate) fn start_dispatcher(ctx: &wv::Context) -> Result<(), wv::Error> {
    if ctx.caller_driven() {
        return start_background_driver(ctx);
    }
    let ec = ctx.event_channel()?;
    let ctx = ctx.clone();
    std::thread::Builder::new()
        .name("warpcore-cm".into())
        .spawn(move || loop {
            match ec.get_event(None) {
                Ok(e) => dispatch(&ctx, e),
                Err(wv::Error::Timeout) => {}
                Err(e) => {
                    eprintln!("warpcore: the CM event thread stops: {e}");
                    return;
                }
            }
        })
        .map_err(|e| wv::Error::Channel(wv::IoError(std::sync::Arc::new(e))))?;
    Ok(())
}

/// With `WARPCORE_POLL_MODE=caller` the application's CQ polls and waits run the engine
/// cores; this thread runs them the rest of the time (connection set-up, acknowledgements,
/// timers, and the data of an application that waits by watching memory, as
/// `ib_write_lat` does) and routes the CM events. While nothing happens it backs off from
/// spinning to 20 us sleeps (for 2,000 rounds) and then to half a millisecond.
fn start_background_driver(ctx: &wv::Context) -> Result<(), wv::Error> {
    let ctx = ctx.clone();
    std::thread::Builder::new()
        .name("warpcore-cm".into())
        .spawn(move || {
            // Sleep as long as asked, not the 50 us of default timer slack more.
            crate::verbs::fine_timer_slack();
            let mut idle = 0u32;
            let mut empty = 0u64;
            loop {
                // An application that waits in ibv_poll_cq (more than a few empty polls
                // since the last look) runs the cores itself: keep off its CPU, and look for
                // CM events every half millisecond. One that waits by watching memory, as
                // ib_write_lat does, polls rarely: then this thread runs the cores.
                let now = crate::verbs::EMPTY_POLLS.load(std::sync::atomic::Ordering::Relaxed);
                let busy = now.wrapping_sub(empty) > 32;
                empty = now;
                if busy {
                    while let Some(e) = ctx.next_event(std::time::Duration::ZERO) {
                        dispatch(&ctx, e);
                    }
                    std::thread::sleep(std::time::Duration::from_micros(500));
                    idle = 0;
                    continue;
                }
                let mut work = ctx.progress();
                while let Some(e) = ctx.next_event(std::time::Duration::ZERO) {
                    work = true;
                    dispatch(&ctx, e);
                }
                idle = if work { 0 } else { idle.saturating_add(1) };
                match idle {
                    0..=100 => std::hint::spin_loop(),
                    101..=2000 => std::thread::sleep(std::time::Duration::from_micros(20)),
                    _ => std::thread::sleep(std::time::Duration::from_micros(500)),
                }
            }
        })
        .map_err(|e| wv::Error::Channel(wv::IoError(std::sync::Arc::new(e))))?;
    Ok(())
}

/// A connection request that ended before the application answered it (its peer gave up,
/// or the engine's startup timeout passed): if its CONNECT_REQUEST still waits in a
/// listener's channel, unread, it is taken out and its new id destroyed, so the
/// application never sees a request that is gone (the engine withdraws such an event
/// itself while it still holds it: docs/engine.md) and the listener's backlog gets its
/// room back. One the application has read stays: its `rdma_accept` fails.
fn withdraw_request(rid: wv::RequestId) {
    let mut gone = Vec::new();
    {
        let reg = registry();
        for &lp in reg.listeners.values() {
            // SAFETY: a registered listener is live (destroy unregisters it first, under
            // the registry lock we hold).
            let lid = unsafe { &*(lp as *mut Id) };
            if let Some(ch) = chan_of(lid) {
                gone.extend(ch.take_where(|ev| {
                    ev.event == RDMA_CM_EVENT_CONNECT_REQUEST
                        && ev.listen_id == lp as *mut rdma_cm_id
                        // SAFETY: a queued CONNECT_REQUEST's new id is live: nobody but
                        // the event has it until the application takes the event.
                        && unsafe { id_ref(ev.id) }.is_some_and(|c| {
                            c.lock().request.as_ref().is_some_and(|r| r.request == rid)
                        })
                }));
            }
        }
    }
    for e in gone {
        // SAFETY: an event of ours, taken out of the queue: nobody else has it.
        let ev = unsafe { Box::from_raw(e) };
        __wc_rdma_destroy_id(ev.ev.id);
    }
}

fn dispatch(ctx: &wv::Context, e: CmEvent) {
    // The events that leave a QP in the error state, its work requests flushed.
    let failed = match &e {
        CmEvent::Disconnected { qp, .. }
        | CmEvent::Error { qp, .. }
        | CmEvent::Rejected { qp, .. } => Some(*qp),
        _ => None,
    };
    dispatch_cm(ctx, e);
    // After the connection's own event (queued on its id's channel, `qp->state` set to
    // ERR): a QP on an SRQ reports IBV_EVENT_QP_LAST_WQE_REACHED (`verbs::qp_failed`),
    // whether or not an id owns it.
    if let Some(qp) = failed {
        verbs::qp_failed(qp);
    }
}

fn dispatch_cm(ctx: &wv::Context, e: CmEvent) {
    match e {
        CmEvent::ConnectRequest(req) => {
            let mut reg = registry();
            // At exit (`refuse_requests_at_exit`): nobody will answer it.
            let listener = reg.listeners.get(&req.local_port).filter(|_| !reg.exiting);
            let Some(&lp) = listener else {
                drop(reg);
                let _ = ctx.reject(&req, &[]);
                return;
            };
            let l = lp as *mut Id;
            // SAFETY: a registered listener is live (destroy unregisters it first, under
            // the registry lock we hold).
            let lid = unsafe { &*l };
            // The listener's backlog (rdma_listen(3)): a request beyond it, while as many
            // CONNECT_REQUESTs wait in the listener's channel unread, is refused, as the
            // kernel's ucma drops one past `backlog` and the peer's connect fails. Without
            // it, an application that read no events while peers kept connecting held a
            // new id and event for each, without bound.
            let backlog = lid.lock().backlog;
            let waiting = chan_of(lid).map_or(0, |ch| {
                ch.count_where(|ev| {
                    ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && ev.listen_id == l.cast()
                })
            });
            if waiting >= backlog {
                drop(reg);
                let _ = ctx.reject(&req, &[]);
                return;
            }
            // librdmacm gives a request's new id the device the request came on and the
            // device's PD (ucma_get_device), whatever its listener was bound to: a listener
            // never bound (rdma_listen alone, the kernel binds it to any address) has no
            // device of its own, and its requests' ids had none (verbs and pd NULL).
            let Some((verbs, pd)) = verbs::context()
                .ok()
                .and_then(|v| Some((v, device_pd(v).ok()?)))
            else {
                drop(reg);
                let _ = ctx.reject(&req, &[]);
                return;
            };
            // The new id is on its listener's channel until its request is read, a
            // synchronous listener's too: librdmacm gives such an id a channel of its own
            // only when `rdma_get_request` reads the request (`ucma_process_conn_req`:
            // `rdma_migrate_id(id, NULL)`), and the kernel holds an unread request without
            // a descriptor. A channel made here (two descriptors) for each request a peer
            // sent, unread, let peers take up to twice the backlog (2,048 for
            // `rdma_listen(id, 0)`) of the process's descriptors, past the usual limit of
            // 1,024: its own `open`, `socket` and `ibv_create_comp_channel` then failed.
            let chan = get!(lid.channel);
            let o = req.remote.0.octets();
            let remote = SocketAddrV4::new(Ipv4Addr::new(o[0], o[1], o[2], o[3]), req.remote.1);
            let local = engine().map(|e| e.ip).unwrap_or(Ipv4Addr::UNSPECIFIED);
            let child = Box::new(Id {
                cm: UnsafeCell::new(rdma_cm_id {
                    verbs,
                    pd,
                    channel: chan,
                    context: get!(lid.context),
                    ps: get!(lid.ps),
                    port_num: 1,
                    qp_type: IBV_QPT_RC,
                    ..Default::default()
                }),
                st: Mutex::new(IdState {
                    port: req.local_port,
                    dst: Some(remote),
                    ..Default::default()
                }),
            });
            set_src(&child, SocketAddrV4::new(local, req.local_port));
            set_dst(&child, remote);
            let resp_init = engine().map_or((0, 0), |e| {
                let d = e.ctx.query_device();
                request_conn_values(req.ird, req.ord, d.max_qp_rd_atom, d.max_qp_init_rd_atom)
            });
            let pdata = req.private_data.clone();
            child.lock().request = Some(req.clone());
            chan_join(get!(child.channel));
            let c = Box::into_raw(child);
            reg.unanswered.insert(c as usize, req);
            let ev = new_event(
                c.cast(),
                l.cast(),
                RDMA_CM_EVENT_CONNECT_REQUEST,
                0,
                &pdata,
                resp_init,
            );
            if let Some(ch) = chan_of(lid) {
                ch.post(ev);
            }
        }
        CmEvent::Established(est) => {
            with_qp_id(est.qp, |id| {
                id.lock().established = true;
                // The QP is the id's (set by rdma_create_qp), live while it is registered.
                // RTS while the connection is up, unless the application moved the QP
                // itself since the connection started: to ERR (or reset once failed) on
                // another thread since the engine reported the connection (its
                // DISCONNECTED follows), or to RESET, INIT, RTR or RTS, which change
                // nothing in the engine. Its ibv_modify_qp came last and stands, as with
                // rdma-core over a kernel iWARP provider (set_qp_rts_established); such
                // a move was overwritten with RTS.
                verbs::set_qp_rts_established(get!(id.qp));
                verbs::set_qp_ird_ord(get!(id.qp), est.ird, est.ord);
                let pd = if id.lock().request.is_some() {
                    Vec::new() // the passive side saw the peer's data in the request
                } else {
                    est.private_data.clone()
                };
                (
                    RDMA_CM_EVENT_ESTABLISHED,
                    0,
                    pd,
                    established_conn_values(est.ird, est.ord),
                )
            });
        }
        CmEvent::Rejected {
            qp, private_data, ..
        } => {
            with_qp_id(qp, |id| {
                // librdmacm answers REJECTED with ucma_modify_qp_err (rdma-core
                // librdmacm/cma.c, rdma_get_cm_event): ibv_modify_qp of the id's QP to ERR,
                // which libibverbs records in qp->state. The engine's QP is in the error
                // state already, its work requests flushed.
                set_err_state(id);
                (
                    RDMA_CM_EVENT_REJECTED,
                    -ECONNREFUSED,
                    private_data.clone(),
                    (0, 0),
                )
            });
        }
        CmEvent::Disconnected { qp, cause } => {
            with_qp_id(qp, |id| {
                set_err_state(id);
                let est = id.lock().established;
                if est {
                    // A close, a reset and a timeout alike: rdma_cm on iWARP reports an
                    // established connection's end as DISCONNECTED with status 0 (iw_cm's
                    // CLOSE event), whatever ended it.
                    (RDMA_CM_EVENT_DISCONNECTED, 0, Vec::new(), (0, 0))
                } else {
                    // SAFETY: the id's QP, if any, is live while the id is registered.
                    let ours = unsafe { qp_ref(get!(id.qp)) }
                        .is_some_and(|q| q.aborted.load(std::sync::atomic::Ordering::Acquire));
                    let (kind, st) = closed_before_established(cause, ours);
                    (kind, st, Vec::new(), (0, 0))
                }
            });
        }
        CmEvent::Error { qp, error } => {
            let reg = registry();
            let known = reg.qps.contains_key(&qp);
            drop(reg);
            if !known {
                return;
            }
            eprintln!("warpcore: connection of QP {:#x} failed: {error}", qp.qpn());
            with_qp_id(qp, |id| {
                set_err_state(id);
                if id.lock().established {
                    (RDMA_CM_EVENT_DISCONNECTED, 0, Vec::new(), (0, 0))
                } else {
                    let (kind, st) = failure_event(&error);
                    (kind, st, Vec::new(), (0, 0))
                }
            });
        }
        CmEvent::CqError { cq } => {
            eprintln!("warpcore: completion queue {cq} overran");
            verbs::push_cq_error(cq);
        }
        CmEvent::SrqLimitReached { srq } => verbs::push_srq_limit(srq),
        CmEvent::RequestCancelled(rid) => withdraw_request(rid),
        CmEvent::RequestRefused { .. } => {}
        // rdma_resolve_addr's answer, as addr_handler (drivers/infiniband/core/cma.c) gives
        // it: ADDR_RESOLVED with status 0, or ADDR_ERROR with rdma_resolve_ip's status,
        // -ETIMEDOUT for a neighbour that did not answer within timeout_ms
        // (drivers/infiniband/core/addr.c, process_one_req). The failed id is back in
        // ADDR_BOUND: no destination for rdma_resolve_route or rdma_connect (EINVAL).
        CmEvent::NeighborResolved(r) | CmEvent::NeighborFailed(r) => {
            let Some(&(_, deadline)) = registry().resolving.get(&r) else {
                return;
            };
            if matches!(e, CmEvent::NeighborFailed(_)) {
                // Not before timeout_ms from the call (addr.c fails the request at its
                // deadline, never sooner): the engine's deadline runs from its own clock's
                // reading when it applied the command (taken after it saw the command),
                // and that clock, interpolated between readings of the system's, is not
                // this one. The difference is well under a millisecond.
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if !left.is_zero() {
                    std::thread::sleep(left);
                }
            }
            // Taken out, the id looked at and its event queued under one hold of the
            // registry, as `with_qp_id` does: an `rdma_destroy_id` meanwhile (during the
            // wait above, say) has removed the resolution, so nothing here touches the
            // freed id; one after purges the queued event.
            let mut reg = registry();
            let Some((p, _)) = reg.resolving.remove(&r) else {
                return;
            };
            let p = p as *mut rdma_cm_id;
            // SAFETY: registered ids are live (rdma_destroy_id unregisters first, under
            // the registry lock held here).
            let Some(id) = (unsafe { id_ref(p) }) else {
                return;
            };
            let (kind, status) = match e {
                CmEvent::NeighborResolved(_) => (RDMA_CM_EVENT_ADDR_RESOLVED, 0),
                _ => {
                    id.lock().dst = None;
                    (RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT)
                }
            };
            if let Some(ch) = chan_of(id) {
                ch.post(new_event(p, null_mut(), kind, status, &[], (0, 0)));
            }
            drop(reg);
        }
    }
}

/// The `responder_resources` and `initiator_depth` of a CONNECT_REQUEST, as the kernel's
/// rdma_cm reports siw's request on the passive side (checked against
/// drivers/infiniband/sw/siw/siw_cm.c and core/cma.c): siw_proc_mpareq takes the peer's
/// RFC 6581 IRD as its own ORD and the peer's ORD as its own IRD, each capped at the
/// device's maximum, siw_cm_upcall hands them up swapped back (`event.ird` the peer's IRD,
/// `event.ord` its ORD), and iw_conn_req_handler makes `initiator_depth = ird`,
/// `responder_resources = ord`. So the request speaks from the listener's side: our
/// responder resources are the peer's ORD (the Reads it will have outstanding), our
/// initiator depth its IRD (the Reads it serves), each at most `max_qp_rd_atom` /
/// `max_qp_init_rd_atom`, which an application may hand back to `rdma_accept` as they
/// are (librdmacm refuses more than the maximum with EINVAL). A Rev 1 request carries
/// none: 0/0, as siw's zeroed endpoint reports. (IB's CM and cxgb4 agree on this side.)
pub(crate) fn request_conn_values(
    peer_ird: Option<u16>,
    peer_ord: Option<u16>,
    max_qp_rd_atom: u16,
    max_qp_init_rd_atom: u16,
) -> (u16, u16) {
    (
        peer_ord.unwrap_or(0).min(max_qp_rd_atom),
        peer_ird.unwrap_or(0).min(max_qp_init_rd_atom),
    )
}

/// The `responder_resources` and `initiator_depth` of an ESTABLISHED, both sides, from our
/// negotiated IRD and ORD, as the kernel's rdma_cm reports them over siw and irdma: their
/// upcalls pass their own IRD and ORD (siw_cm_upcall: `event.ird = cep->ird`,
/// `event.ord = cep->ord` for CONNECT_REPLY and ESTABLISHED; irdma_send_cm_event likewise),
/// and cma_iw_handler makes `initiator_depth = ird`, `responder_resources = ord`. The
/// values read as the peer's perspective: `responder_resources` is our ORD (what the
/// peer's responder serves us), `initiator_depth` our IRD. The Linux SMB client's
/// smbd_conn_upcall (fs/smb/client/smbdirect.c) swaps them back on iWARP devices for that
/// reason ("Tested with siw and irdma"). (cxgb4 reports the other way round, as IB does;
/// we follow siw and irdma.)
pub(crate) fn established_conn_values(ird: u16, ord: u16) -> (u16, u16) {
    (ord, ird)
}

/// The event and status of a connection that failed before it was established, as the
/// kernel's rdma_cm reports an iWARP provider's failed connection (`cma_iw_handler`: a
/// status of `-ECONNREFUSED`/`-ECONNRESET` is `REJECTED`, `-ETIMEDOUT` is `UNREACHABLE`,
/// any other `CONNECT_ERROR`), the status chosen as siw and cxgb4 choose it. (A peer's MPA
/// reject is the engine's `CmEvent::Rejected`, `REJECTED` with `-ECONNREFUSED` and its
/// private data, in `dispatch`.)
pub(crate) fn failure_event(error: &wv::ConnError) -> (rdma_cm_event_type, c_int) {
    use warpcore_proto::mpa::negotiation::NegotiationError as N;
    use wv::ConnError as C;
    match error {
        // No MPA Reply within the startup timer (siw's and cxgb4's MPA timer: -ETIMEDOUT).
        C::Negotiation {
            error: N::Timeout, ..
        } => (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT),
        // The peer closed the stream during the MPA startup: refused (both providers
        // report -ECONNRESET for a close while they await the Reply).
        C::Negotiation {
            error: N::PeerClosed,
            ..
        } => (RDMA_CM_EVENT_REJECTED, -ECONNRESET),
        // A RST to our SYN (nothing listens) or a reset during the set-up: refused, as an
        // iWARP provider reports a refused connect (cxgb4's -ECONNREFUSED, which
        // cma_iw_handler makes REJECTED).
        C::TcpReset => (RDMA_CM_EVENT_REJECTED, -ECONNREFUSED),
        // The SYN's retransmissions or the user timeout ran out, the SYN sent and
        // unanswered: -ETIMEDOUT, UNREACHABLE.
        C::TcpTimedOut => (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT),
        // The next hop never answered ARP, so no SYN left: cxgb4's ARP miss
        // (CPL_ERR_ARP_MISS, which its status2errno makes -EHOSTUNREACH, handed to
        // connect_reply_upcall), which cma_iw_handler's default case makes CONNECT_ERROR
        // (docs/rdma-compat.md, "Address resolution").
        C::NeighborUnresolved => (RDMA_CM_EVENT_CONNECT_ERROR, -EHOSTUNREACH),
        // A malformed or unacceptable Reply, no common RTR or IRD, a Terminate: a protocol
        // failure (cxgb4's -EPROTO for a bad Reply).
        C::Negotiation { .. }
        | C::LocalTerminate(_)
        | C::LocalOperation { .. }
        | C::RemoteTerminate(_) => (RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO),
        C::CqOverrun => (RDMA_CM_EVENT_CONNECT_ERROR, -crate::EIO),
    }
}

/// The event and status of a connection that ended (`CmEvent::Disconnected`) before its id
/// saw ESTABLISHED, as the kernel's rdma_cm reports it on iWARP: an iWARP provider
/// answers a connect that never completed with an `IW_CM_EVENT_CONNECT_REPLY` whose status
/// `cma_iw_handler` reads (`-ECONNRESET`/`-ECONNREFUSED` `REJECTED`, `-ETIMEDOUT`
/// `UNREACHABLE`, any other `CONNECT_ERROR`), never a DISCONNECTED. The peer closing or
/// resetting the stream before the MPA Reply is `-ECONNRESET` (siw's and cxgb4's status
/// for a close or an abort while they await the Reply): `REJECTED`. A TCP timeout is
/// `-ETIMEDOUT`: `UNREACHABLE`. `ours`: the application moved the QP to ERR itself
/// (`ibv_modify_qp`, which resets the stream), which the providers answer with
/// `-EINVAL` (siw's `siw_qp_cm_drop` while it awaits the Reply; cxgb4 fails the Reply's
/// move of the QP to RTS): `CONNECT_ERROR`, not a rejection by the peer.
pub(crate) fn closed_before_established(
    cause: wv::DisconnectCause,
    ours: bool,
) -> (rdma_cm_event_type, c_int) {
    use wv::DisconnectCause as D;
    match cause {
        _ if ours => (RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL),
        D::Closed | D::Reset => (RDMA_CM_EVENT_REJECTED, -ECONNRESET),
        // Our graceful close given up without progress (`close_timeout_ms`): a timeout.
        D::TimedOut | D::CloseTimedOut => (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT),
    }
}

/// `qp->state` of the id's QP to ERR for an event that ended its connection, if the QP is
/// still failed: an application that saw its requests flushed may have reset it (ERR ->
/// RESET, the engine's `reset_qp`) before the dispatcher reached the event, and its RESET,
/// INIT or new connection is not to be overwritten.
fn set_err_state(id: &Id) {
    // Checked and stored under the lock a reset holds (it was checked, then stored: a
    // reset in between was overwritten with ERR, and no later event corrected it).
    verbs::set_qp_state_if(get!(id.qp), IBV_QPS_ERR, |s| {
        matches!(s, wv::QpState::Error | wv::QpState::Terminate)
    });
}

/// Queues the event `f` builds on the channel of the id that owns `qp`.
fn with_qp_id(qp: QpId, f: impl FnOnce(&Id) -> (rdma_cm_event_type, c_int, Vec<u8>, (u16, u16))) {
    let reg = registry();
    let Some(&p) = reg.qps.get(&qp) else { return };
    // SAFETY: a registered id is live (destroy unregisters under this lock).
    let id = unsafe { &*(p as *mut Id) };
    let (kind, status, pd, io) = f(id);
    let ev = new_event(p as *mut rdma_cm_id, null_mut(), kind, status, &pd, io);
    let Some(ch) = chan_of(id) else { return };
    let settle = settle_ms();
    if kind == RDMA_CM_EVENT_ESTABLISHED && id.lock().request.is_none() && settle > 0 {
        // WARPCORE_SETTLE_MS: the active side learns of the connection that much later,
        // so its first Send does not follow the MPA Reply at once (siw drops FPDUs that
        // arrive before it hands the socket to the QP: docs/interop.md, siw item 1; iwping's
        // --settle-ms). This thread waits, holding the registry: every later event stays
        // behind this one, and the id and its channel cannot be destroyed meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(settle));
    }
    ch.post(ev);
    drop(reg);
}

/// `WARPCORE_SETTLE_MS` (default 0): how long an active side's ESTABLISHED is held back
/// (read, and a bad value refused, when the engine starts: `crate::own_vars`).
fn settle_ms() -> u64 {
    crate::engine_if_open().map_or(0, |e| e.settle_ms)
}

// ---------------------------------------------------------------- channels and events

#[no_mangle]
pub extern "C" fn __wc_rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(null_mut(), || match Chan::new() {
        Ok(c) => c.cast(),
        Err(e) => fail(e, null_mut()),
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    // Freed now, or, while ids are still on it, by the last one's rdma_destroy_id (its
    // descriptor stays open until then, so the dispatcher's token never reaches a
    // descriptor the application reused).
    guard((), || chan_close(ch))
}

#[no_mangle]
pub extern "C" fn __wc_rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    guard(-1, || {
        if ch.is_null() || out.is_null() {
            return fail(EINVAL, -1);
        }
        // SAFETY: ch came from rdma_create_event_channel.
        let c = unsafe { &*ch.cast::<Chan>() };
        match c.take_counted() {
            Ok(e) => {
                // SAFETY: an event of ours, just taken; a CONNECT_REQUEST's listener is
                // live while the event is unacknowledged (counted against it above).
                let ev = unsafe { &(*e).ev };
                let request = ev.event == RDMA_CM_EVENT_CONNECT_REQUEST;
                // SAFETY: as above (only a CONNECT_REQUEST's listener is looked at).
                if request && unsafe { id_ref(ev.listen_id) }.is_some_and(is_sync) {
                    // librdmacm's ucma_process_conn_req: the new id of a synchronous
                    // listener's request gets a channel of its own when the request is
                    // read (rdma_get_request does the same); it stays on the listener's
                    // if none can be made.
                    let _ = __wc_rdma_migrate_id(ev.id, null_mut());
                }
                // SAFETY: out is the caller's.
                unsafe { *out = e.cast() };
                0
            }
            Err(e) => fail(e, -1),
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    guard(-1, || {
        if ev.is_null() {
            return fail(EINVAL, -1);
        }
        // SAFETY: ev came from rdma_get_cm_event and is acknowledged once.
        let b = unsafe { Box::from_raw(ev.cast::<Ev>()) };
        // SAFETY: an id is not freed while an event counted against it is unacknowledged
        // (a connection request's new id may be gone: it is not touched).
        if let Some(i) = unsafe { id_ref(counted_id(&b.ev)) } {
            let mut st = i.lock();
            st.unacked = st.unacked.saturating_sub(1);
            st.acked += 1;
        }
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_event_str(e: rdma_cm_event_type) -> *const c_char {
    let s: &'static [u8] = match e {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}

// ---------------------------------------------------------------- ids

fn create_id(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
) -> Result<*mut Id, c_int> {
    if ps != RDMA_PS_TCP {
        eprintln!(
            "warpcore: rdma_create_id: port space {ps:#x} is not supported: iWARP runs over \
             TCP (RDMA_PS_TCP, reliable-connected QPs) only"
        );
        return Err(EOPNOTSUPP);
    }
    let (chan, sync) = if ch.is_null() {
        // ENOMEM whatever refused the channel, as librdmacm's rdma_create_id2
        // answers ucma_alloc_id's failure (`ERR(ENOMEM)`), unlike
        // rdma_create_event_channel and rdma_migrate_id, which leave its errno.
        (Chan::new().map_err(|_| crate::ENOMEM)?.cast(), true)
    } else {
        (ch, false)
    };
    chan_join(chan);
    let b = Box::new(Id {
        cm: UnsafeCell::new(rdma_cm_id {
            channel: chan,
            context,
            ps,
            qp_type: IBV_QPT_RC,
            ..Default::default()
        }),
        st: Mutex::new(IdState {
            sync,
            ..Default::default()
        }),
    });
    Ok(Box::into_raw(b))
}

#[no_mangle]
pub extern "C" fn __wc_rdma_create_id(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    guard(-1, || {
        if out.is_null() {
            return fail(EINVAL, -1);
        }
        match create_id(ch, context, ps) {
            Ok(p) => {
                // SAFETY: out is the caller's.
                unsafe { *out = p.cast() };
                0
            }
            Err(e) => fail(e, -1),
        }
    })
}

/// Points the id at the process's device (starting the engine) and, if it has none, at
/// the device's PD (librdmacm's `ucma_get_device`).
fn attach_device(id: &Id) -> Result<(), c_int> {
    if get!(id.verbs).is_null() {
        set!(id.verbs = verbs::context()?);
        set!(id.port_num = 1);
    }
    if get!(id.pd).is_null() {
        set!(id.pd = device_pd(get!(id.verbs))?);
    }
    Ok(())
}

/// The device's PD, which librdmacm gives every id bound to the device (`id->pd`, one per
/// device): `rdma_create_qp` and `rdma_create_srq` use it when the caller names none, and an
/// application may register memory on it before the id has a QP. Made on first use, it
/// lives as long as the process, as the device does (librdmacm frees it with the device's
/// last id; an application that frees it itself breaks librdmacm's ids as it does ours).
fn device_pd(ctx: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    static PD: Mutex<usize> = Mutex::new(0);
    let mut pd = PD.lock().unwrap_or_else(|e| e.into_inner());
    if *pd == 0 {
        let p = verbs::__wc_ibv_alloc_pd(ctx);
        if p.is_null() {
            return Err(crate::ENOMEM);
        }
        *pd = p as usize;
    }
    Ok(*pd as *mut ibv_pd)
}

#[no_mangle]
pub extern "C" fn __wc_rdma_destroy_id(p: *mut rdma_cm_id) -> c_int {
    guard(-1, || {
        if p.is_null() {
            return fail(EINVAL, -1);
        }
        // The engine's QPs whose connections this id made.
        let mine: Vec<QpId>;
        {
            let mut reg = registry();
            let port = reg
                .listeners
                .iter()
                .find(|(_, v)| **v == p as usize)
                .map(|(k, _)| *k);
            reg.listeners.retain(|_, v| *v != p as usize);
            mine = reg
                .qps
                .iter()
                .filter(|(_, v)| **v == p as usize)
                .map(|(k, _)| *k)
                .collect();
            reg.qps.retain(|_, v| *v != p as usize);
            // Its request, if not answered, is refused below.
            reg.unanswered.remove(&(p as usize));
            // SAFETY: p came from rdma_create_id or a connect request and is live.
            if let Some(port) = unsafe { &*p.cast::<Id>() }.lock().held.take() {
                reg.release(port);
            }
            // A resolution still running answers nobody (rdma_destroy_id cancels it, as the
            // kernel's cma_cancel_operation cancels rdma_resolve_ip's request).
            reg.resolving.retain(|_, v| v.0 != p as usize);
            // A listener's port stops listening in the engine too: a SYN to it now draws a
            // RST (the peer's connect is refused at once, as by the kernel once the
            // listening id is gone), not a TCP connection and an MPA Request the
            // dispatcher would reject. Under the registry lock, as rdma_listen listens.
            if let (Some(port), Ok(eng)) = (port, engine()) {
                if listening().remove(&port) {
                    let _ = eng.ctx.unlisten(port);
                }
            }
        }
        // SAFETY: p came from rdma_create_id or a connect request and is live.
        let me = unsafe { &*p.cast::<Id>() };
        // A connection the id's QP (still the application's) holds ends, as the kernel's
        // iw_cm ends it (`destroy_cm_id`): the peer learns at once. Unregistered first,
        // so the dispatcher reports nothing of it to the id. `id->qp`, not the id's own
        // record of a QP: the application may have made it (`ibv_create_qp`) and set it.
        verbs::close_on_destroy_id(get!(me.qp), &mine);
        // Unregistered, the id gets no new event from the dispatcher; those queued are
        // cancelled (rdma_destroy_id(3)): a listener's connection requests with the child
        // ids they made (destroying a child refuses its request).
        if let Some(ch) = chan_of(me) {
            for e in ch.purge(p) {
                // SAFETY: an event of ours, taken out of the queue: nobody else has it.
                let ev = unsafe { Box::from_raw(e) };
                if ev.ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && ev.ev.listen_id == p {
                    __wc_rdma_destroy_id(ev.ev.id);
                }
            }
        }
        // Events handed out and not yet acknowledged still point at it: wait for their
        // acknowledgements, as librdmacm does.
        while me.lock().unacked > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: p came from rdma_create_id or a connect request; the application is
        // done with it and no event names it any more.
        let b = unsafe { Box::from_raw(p.cast::<Id>()) };
        release_event(&b);
        let st = std::mem::take(&mut *b.lock());
        if let Some(req) = st.request.as_ref().filter(|_| !st.started) {
            // A request never accepted: refuse it so the peer is not left waiting, as the
            // kernel's iw_cm refuses one whose id is destroyed in IW_CM_STATE_CONN_RECV
            // (iwcm.c destroy_cm_id: "App called destroy before/without calling accept
            // ... must tell the provider to reject"). Whether `rdma_accept` started the
            // connection decides, not whether the id has a QP of `rdma_create_qp`'s: a
            // request whose `rdma_accept` failed (EINVAL for its parameters, nothing sent:
            // librdmacm's ucma_valid_param) on such a QP was left unanswered, the peer
            // waiting for its connect timeout; one accepted on a QP the application made
            // (`ibv_create_qp`) was "rejected" after its acceptance (the engine, which had
            // taken the request, refused the stale handle). An accepted one's connection
            // is closed above (`close_on_destroy_id`), as iw_cm's destroy_cm_id closes it.
            if let Some(e) = crate::engine_if_open() {
                let _ = e.ctx.reject(req, &[]);
            }
        }
        // As in librdmacm, the QP is the application's to destroy (rdma_destroy_qp or
        // ibv_destroy_qp) before the id; rdma_destroy_ep does both.
        if get!(b.qp).is_null() {
            destroy_own_cqs(&b, st.own_cqs);
        }
        if st.sync {
            chan_close(get!(b.channel));
        }
        chan_leave(get!(b.channel));
        0
    })
}

fn destroy_own_cqs(id: &Id, (send, recv): (bool, bool)) {
    if send {
        verbs::__wc_ibv_destroy_cq(get!(id.send_cq));
        verbs::__wc_ibv_destroy_comp_channel(get!(id.send_cq_channel));
    }
    if recv {
        verbs::__wc_ibv_destroy_cq(get!(id.recv_cq));
        verbs::__wc_ibv_destroy_comp_channel(get!(id.recv_cq_channel));
    }
}

#[no_mangle]
pub extern "C" fn __wc_rdma_migrate_id(p: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        let was_sync = id.lock().sync;
        if was_sync && ch.is_null() {
            // librdmacm: a synchronous id is already where a NULL channel would put it.
            return fail(EINVAL, -1);
        }
        let new = if ch.is_null() {
            match Chan::new() {
                Ok(c) => c.cast(),
                Err(e) => return fail(e, -1),
            }
        } else {
            ch
        };
        // The id's own channel is no exception (it returned 0 at once): librdmacm writes
        // the move to the kernel all the same, whose ucma_migrate_id answers with the
        // events it reported for the id (and, since Linux 5.10, moves the id's pending
        // events to the tail of the same list), and librdmacm then waits for their
        // acknowledgement as for any move (librdmacm cma.c, rdma_migrate_id;
        // drivers/infiniband/core/ucma.c, ucma_migrate_id).
        let same = new == get!(id.channel);
        // rdma_migrate_id(3) "moves any pending events associated with the rdma_cm_id to
        // the new channel". Under the registry's lock, which the dispatcher holds while it
        // queues an event on an id's channel: none of the id's events goes to the old
        // channel after the move, and a private old channel is not freed while the
        // dispatcher queues on it.
        let reg = registry();
        chan_join(new);
        let old = get!(id.channel);
        set!(id.channel = new);
        id.lock().sync = ch.is_null();
        // The events of the id handed out so far (acknowledged or not), for the wait below,
        // counted under the old queue's lock as its pending events are taken out:
        // `rdma_get_cm_event` on another thread counts the event it takes under that lock
        // (`take_counted`), so each of the id's events is either in this count or moved,
        // never neither. Counted before the purge (as it was), an event another thread
        // took between the two was in neither, and this call returned while that thread
        // still handled it from the old channel.
        let handed_out = || {
            let st = id.lock();
            st.acked + st.unacked as u64
        };
        // SAFETY: the old channel is live until the id leaves it (freed below if private).
        let (moved, handed_out) = match unsafe { old.cast::<Chan>().as_ref() } {
            Some(c) => c.purge_then(p, handed_out),
            None => (Vec::new(), handed_out()),
        };
        // SAFETY: new is a live channel (the caller's, or the one just made).
        let to = unsafe { &*new.cast::<Chan>() };
        for e in moved {
            // SAFETY: an event of ours, taken out of the old queue: nobody else has it.
            let ev = unsafe { &(*e).ev };
            if ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && ev.listen_id == p {
                // A listener's pending request: its new id belongs where the listener's
                // events go (librdmacm makes it on the listener's channel when the request
                // is read), as the dispatcher would have made it.
                // SAFETY: the new id the dispatcher made; the application has not seen it.
                rehome_child(unsafe { &*ev.id.cast::<Id>() }, new);
            }
            to.post(e);
        }
        drop(reg);
        if was_sync {
            // librdmacm acknowledges the event a synchronous id held.
            release_event(id);
            // Its private channel is let go, unless the application named that very
            // channel (then it is the application's now, as any channel it passes).
            if !same {
                chan_close(old);
            }
        }
        chan_leave(old);
        // rdma_migrate_id(3): "This call will block while there are any unacknowledged
        // events on the current event channel": librdmacm waits until the events the
        // kernel reported for the id before the move are acknowledged, so no thread still
        // handles one of the id's events from the old channel when this returns. (A
        // CONNECT_REQUEST counts as its listener's, `counted_id`.) It returned at once.
        while id.lock().acked < handed_out {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        0
    })
}

/// Moves the new id of a pending connection request to the channel its listener moved to
/// (a synchronous listener's included: the new id gets a channel of its own only when
/// `rdma_get_request` reads the request).
fn rehome_child(child: &Id, listener_chan: *mut rdma_event_channel) {
    chan_join(listener_chan);
    let old = get!(child.channel);
    set!(child.channel = listener_chan);
    chan_leave(old);
}

/// Waits, on a synchronous id, for the next event of its channel (the one its call queued,
/// or one queued before it, as librdmacm takes whatever comes next) and answers as
/// librdmacm's `ucma_complete` does (`sync_result`). The event stays in `id->event` until
/// the id's next synchronous call or its destruction, as librdmacm keeps it: that is where
/// a synchronous application reads what the peer sent (the private data of the MPA Reply
/// after `rdma_connect`, its IRD/ORD, the status of a failure) and which event came.
fn wait_sync(id: &Id) -> Result<(), c_int> {
    release_event(id);
    let Some(ch) = chan_of(id) else {
        return Err(EINVAL);
    };
    let e = ch.take()?;
    keep_event(id, e);
    // SAFETY: an event of ours, held by the id.
    let ev = unsafe { &(*e).ev };
    sync_result(ev.event, ev.status)
}

/// A synchronous call's answer to the event it took, as rdma-core's librdmacm
/// `ucma_complete` gives it: whatever the event, a status of 0 is success (an event other
/// than the one the call queued, say an ADDR_RESOLVED still pending on an id migrated to
/// no channel before `rdma_resolve_route`, included: it is in `id->event`); otherwise a
/// REJECTED is `ECONNREFUSED`, a negative status its errno, a positive one (an InfiniBand
/// reason code, which iWARP never gives) itself.
pub(crate) fn sync_result(event: rdma_cm_event_type, status: c_int) -> Result<(), c_int> {
    match status {
        0 => Ok(()),
        _ if event == RDMA_CM_EVENT_REJECTED => Err(ECONNREFUSED),
        s if s < 0 => Err(-s),
        s => Err(s),
    }
}

/// Gives a synchronous id the event its last call took (`id->event`), freeing the one it
/// held.
fn keep_event(id: &Id, e: *mut Ev) {
    release_event(id);
    // SAFETY: an event of ours, now held by the id.
    let kind = unsafe { (*e).ev.event };
    if matches!(
        kind,
        RDMA_CM_EVENT_DISCONNECTED
            | RDMA_CM_EVENT_REJECTED
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR
    ) {
        id.lock().ended = true;
    }
    set!(id.event = e.cast());
}

/// Frees the event a synchronous id holds in `id->event` (librdmacm acknowledges it).
fn release_event(id: &Id) {
    let e = get!(id.event);
    set!(id.event = null_mut());
    if !e.is_null() {
        // SAFETY: an id's event is one of ours that only the id holds (it was taken off
        // the channel by a synchronous call, and is never counted as handed out).
        drop(unsafe { Box::from_raw(e.cast::<Ev>()) });
    }
}

fn is_sync(id: &Id) -> bool {
    id.lock().sync
}

#[no_mangle]
pub extern "C" fn __wc_rdma_bind_addr(p: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // SAFETY: addr is the caller's socket address.
        let a = match unsafe { from_sockaddr(addr) } {
            Ok(Some(a)) => a,
            Ok(None) => return fail(EINVAL, -1),
            Err(e) => return fail(e, -1),
        };
        if let Err(e) = attach_device(id) {
            return fail(e, -1);
        }
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        // A loopback address binds to the device, as the kernel's rdma_cm attaches a
        // loopback id to its first device: libfabric's verbs provider binds "localhost"
        // for a passive endpoint given no address, and reads the address it got.
        if !a.ip().is_unspecified() && !a.ip().is_loopback() && *a.ip() != eng.ip {
            return fail(EADDRNOTAVAIL, -1);
        }
        {
            let mut reg = registry();
            let mut st = id.lock();
            // Only an idle id binds: the kernel's rdma_bind_addr moves RDMA_CM_IDLE to
            // ADDR_BOUND or fails with EINVAL (an id bound already, to a port or to port 0,
            // resolved, listening, or a connection request's). Before, a second bind
            // moved the id's port, a listener's away from the port it listens on.
            if st.bound || st.port != 0 || st.dst.is_some() || st.request.is_some() {
                return fail(EINVAL, -1);
            }
            // A port another id is bound to, listens on or connects from: EADDRINUSE, as
            // the kernel's cma_use_port refuses it without SO_REUSEADDR. Held from here on
            // (given back by rdma_destroy_id). Before, the bind succeeded and the conflict
            // came out at rdma_listen, or never for an active id.
            // With RDMA_OPTION_ID_REUSEADDR, a port bound by others but listened on by
            // none is shared (the kernel's cma_check_port lets reuseaddr ids share one
            // no listener has).
            if a.port() != 0 {
                let taken = if st.reuseaddr {
                    reg.listeners.contains_key(&a.port())
                } else {
                    reg.port_taken(a.port())
                };
                if taken {
                    return fail(EADDRINUSE, -1);
                }
                reg.hold(a.port());
                st.held = Some(a.port());
            }
            st.bound = true;
            st.port = a.port();
        }
        set_src(id, SocketAddrV4::new(eng.ip, a.port()));
        0
    })
}

/// The ports the engine listens on (`rdma_listen` adds, the listener's `rdma_destroy_id`
/// takes away). Taken after the registry lock.
fn listening() -> std::sync::MutexGuard<'static, std::collections::HashSet<u16>> {
    static LISTENING: OnceLock<Mutex<std::collections::HashSet<u16>>> = OnceLock::new();
    LISTENING
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
pub extern "C" fn __wc_rdma_listen(p: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours (the caller's id, not used by it during the call).
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // An id listening already: EINVAL, as the kernel's rdma_listen answers (its
        // rdma_bind_addr refuses an id that is not idle). Before, EADDRINUSE.
        if id.lock().listening {
            return fail(EINVAL, -1);
        }
        // An active id (its address being resolved or resolved, or connected) or a
        // request's id: EINVAL, as the kernel's rdma_listen answers an id that is neither
        // idle nor in ADDR_BOUND (`cma_comp_exch(id_priv, RDMA_CM_ADDR_BOUND,
        // RDMA_CM_LISTEN)` fails). Before, it listened on the port the id was to connect
        // from.
        {
            let st = id.lock();
            if st.dst.is_some() || st.request.is_some() {
                return fail(EINVAL, -1);
            }
        }
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        let mut reg = registry();
        let bound = id.lock().port;
        // Bound to port 0: an ephemeral port, as the kernel's rdma_cm picks one (libfabric's
        // passive endpoints listen so, then read the port with rdma_get_local_addr); the
        // id takes it once the listener exists.
        let port = if bound == 0 {
            let Some(free) = EPHEMERAL.clone().find(|p| !reg.port_taken(*p)) else {
                return fail(EADDRINUSE, -1);
            };
            free
        } else {
            bound
        };
        if reg.listeners.contains_key(&port) {
            return fail(EADDRINUSE, -1);
        }
        let mut l = listening();
        if !l.contains(&port) {
            if let Err(e) = eng.ctx.listen(port, &eng.mpa) {
                return fail(errno_of(&e).max(EADDRINUSE), -1);
            }
            l.insert(port);
        }
        reg.listeners.insert(port, p as usize);
        if bound == 0 {
            id.lock().port = port;
            set_src(id, SocketAddrV4::new(eng.ip, port));
        }
        // The kernel's ucma: a backlog of at most its `max_backlog` (1,024), that for
        // none or a negative one.
        id.lock().backlog = match usize::try_from(backlog) {
            Ok(b @ 1..=MAX_BACKLOG) => b,
            _ => MAX_BACKLOG,
        };
        id.lock().listening = true;
        0
    })
}

/// The largest listen backlog, and the backlog of `rdma_listen(id, 0)`: the kernel's ucma
/// default of its `max_backlog` sysctl.
const MAX_BACKLOG: usize = 1024;

#[no_mangle]
pub extern "C" fn __wc_rdma_resolve_addr(
    p: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // A resolution of this id's still running: EINVAL, as the kernel's state check
        // answers an id in ADDR_QUERY (rdma_resolve_addr: ADDR_BOUND -> ADDR_QUERY fails).
        // Before, a second one ran beside it and the id got two answers.
        if addr_query(p) {
            return fail(EINVAL, -1);
        }
        // A listening id, a request's id, or one whose address is resolved (or connected):
        // EINVAL, as the kernel's rdma_resolve_addr answers an id neither idle nor in
        // ADDR_BOUND (resolve_prepare_src: ADDR_BOUND -> ADDR_QUERY fails, and
        // rdma_bind_addr_dst binds only an idle id). After an ADDR_ERROR the id is in
        // ADDR_BOUND again (no destination): a resolution is taken. Before, a listener's
        // failed with EADDRINUSE and a resolved id's ran again and queued a second
        // ADDR_RESOLVED.
        {
            let st = id.lock();
            if st.listening || st.request.is_some() || st.dst.is_some() {
                return fail(EINVAL, -1);
            }
        }
        // SAFETY: src and dst are NULL or the caller's socket addresses.
        let (s, d) = match unsafe { (from_sockaddr(src), from_sockaddr(dst)) } {
            (Ok(s), Ok(Some(d))) => (s, d),
            (Err(e), _) | (_, Err(e)) => return fail(e, -1),
            _ => return fail(EINVAL, -1),
        };
        if let Err(e) = attach_device(id) {
            return fail(e, -1);
        }
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        if let Some(s) = s {
            if !s.ip().is_unspecified() && *s.ip() != eng.ip {
                return fail(EADDRNOTAVAIL, -1);
            }
        }
        // No route to the address (off the port's subnet, no gateway): the call fails with
        // ENETUNREACH and no event, as the kernel's does (rdma_resolve_ip's route lookup,
        // ip_route_output_key, fails at once, and rdma_resolve_addr returns its error with
        // the id back in ADDR_BOUND). The id keeps no destination, so rdma_resolve_route
        // is EINVAL, as the kernel's state check answers. (Before, this queued an
        // ADDR_ERROR with -EHOSTUNREACH, a status the kernel's IPv4 resolution never
        // reports. Its ADDR_ERROR on iWARP carries -ETIMEDOUT, for a next hop that did not
        // answer ARP within the call's timeout: docs/rdma-compat.md, "Address resolution".)
        if !crate::reachable(eng, *d.ip()) {
            return fail(ENETUNREACH, -1);
        }
        if chan_of(id).is_none() {
            return fail(EINVAL, -1);
        }
        // The id's port, which its connection will use (rdma_connect): the one it was bound
        // to (rdma_bind_addr, or an earlier rdma_resolve_addr that ended in ADDR_ERROR: the
        // kernel binds an id once, and src is ignored after), else src's, else an ephemeral
        // port free in the process, bound now, as the kernel's rdma_resolve_addr binds an
        // unbound id (cma_bind_addr): rdma_get_src_port and rdma_get_local_addr answer it
        // from here on, as they do the kernel's.
        let port = {
            let mut reg = registry();
            let mut st = id.lock();
            let port = match (st.port, s.map_or(0, |s| s.port())) {
                (0, 0) => match reg.ephemeral_port() {
                    Some(p) => p,
                    None => return fail(EADDRNOTAVAIL, -1),
                },
                (0, p) | (p, _) => p,
            };
            // A port another id holds or listens on: EADDRINUSE, as the kernel's
            // cma_bind_addr refuses a port bound already (no SO_REUSEADDR).
            if st.held != Some(port) && reg.port_taken(port) {
                return fail(EADDRINUSE, -1);
            }
            if st.held != Some(port) {
                if let Some(old) = st.held.take() {
                    reg.release(old);
                }
                reg.hold(port);
                st.held = Some(port);
            }
            st.port = port;
            port
        };
        set_src(id, SocketAddrV4::new(eng.ip, port));
        set_dst(id, d);
        id.lock().dst = Some(d);
        // The neighbour is resolved as the kernel's rdma_resolve_ip resolves it: ARP for the
        // next hop, asked again until it answers (ADDR_RESOLVED, status 0) or until
        // timeout_ms has passed (ADDR_ERROR, -ETIMEDOUT), both from the dispatcher
        // (`dispatch`). librdmacm hands timeout_ms to the kernel as a u32: a negative one
        // is some 49 days. Under the registry lock, so the answer (which the dispatcher
        // looks up there) cannot come before the resolution is recorded.
        let timeout = std::time::Duration::from_millis(u64::from(timeout_ms as u32));
        let deadline = std::time::Instant::now() + timeout;
        if *d.ip() == eng.ip {
            // Our own address resolves at once, as the kernel's does through the loopback
            // device (addr.c, addr_resolve_neigh: rdma_translate_ip for IFF_LOOPBACK).
            if let Some(ch) = chan_of(id) {
                ch.post(new_event(
                    p,
                    null_mut(),
                    RDMA_CM_EVENT_ADDR_RESOLVED,
                    0,
                    &[],
                    (0, 0),
                ));
            }
            if is_sync(id) {
                if let Err(e) = wait_sync(id) {
                    return fail(e, -1);
                }
            }
            return 0;
        }
        let mut reg = registry();
        match eng.ctx.resolve_neighbor(*d.ip(), timeout) {
            Ok(r) => {
                reg.resolving.insert(r, (p as usize, deadline));
            }
            Err(e) => {
                drop(reg);
                id.lock().dst = None;
                // Too many resolutions pending: ENOMEM, as the kernel's allocation of
                // another request would fail.
                let errno = match e {
                    wv::Error::Tcp(wv::StackError::TooManyResolutions(_)) => crate::ENOMEM,
                    wv::Error::Tcp(wv::StackError::NoRoute(_)) => ENETUNREACH,
                    e => errno_of(&e),
                };
                return fail(errno, -1);
            }
        }
        drop(reg);
        if is_sync(id) {
            if let Err(e) = wait_sync(id) {
                return fail(e, -1);
            }
        }
        0
    })
}

/// Whether `rdma_resolve_addr`'s resolution of id `p` still runs (the kernel's id in
/// RDMA_CM_ADDR_QUERY: no ADDR_RESOLVED or ADDR_ERROR queued yet).
fn addr_query(p: *mut rdma_cm_id) -> bool {
    registry().resolving.values().any(|v| v.0 == p as usize)
}

#[no_mangle]
pub extern "C" fn __wc_rdma_resolve_route(p: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // No destination, or one whose address is still being resolved: EINVAL, as the
        // kernel's rdma_resolve_route answers an id not in ADDR_RESOLVED (one in
        // ADDR_QUERY included). Before, ROUTE_RESOLVED was queued at once, ahead of the
        // address's own ADDR_RESOLVED or ADDR_ERROR.
        if id.lock().dst.is_none() || addr_query(p) {
            return fail(EINVAL, -1);
        }
        let Some(ch) = chan_of(id) else {
            return fail(EINVAL, -1);
        };
        ch.post(new_event(
            p,
            null_mut(),
            RDMA_CM_EVENT_ROUTE_RESOLVED,
            0,
            &[],
            (0, 0),
        ));
        if is_sync(id) {
            if let Err(e) = wait_sync(id) {
                return fail(e, -1);
            }
        }
        0
    })
}

// ---------------------------------------------------------------- QPs on ids

fn create_qp_on(id: &Id, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    attach_device(id)?;
    if !get!(id.qp).is_null() {
        return Err(EINVAL);
    }
    // librdmacm's rdma_create_qp_ex: a CQ the attributes name must be the id's where the
    // id has one (the application may set `id->send_cq` / `id->recv_cq`), else EINVAL.
    let differs = |of_id: *mut ibv_cq, given: *mut ibv_cq| {
        !of_id.is_null() && !given.is_null() && of_id != given
    };
    if differs(get!(id.send_cq), attr.send_cq) || differs(get!(id.recv_cq), attr.recv_cq) {
        return Err(EINVAL);
    }
    let given = (attr.send_cq, attr.recv_cq);
    let before = (
        get!(id.send_cq),
        get!(id.send_cq_channel),
        get!(id.recv_cq),
        get!(id.recv_cq_channel),
    );
    let made = create_qp_cqs_and_qp(id, pd, attr);
    if made.is_err() {
        // librdmacm's rdma_create_qp_ex destroys the CQs and channels it made for a QP it
        // could not create (`ucma_destroy_cqs`): kept, they stayed on the id, and a second
        // try made new ones over them, the first pair never destroyed.
        let own = std::mem::take(&mut id.lock().own_cqs);
        destroy_own_cqs(id, own);
        let (send_cq, send_cq_channel, recv_cq, recv_cq_channel) = before;
        set!(id.send_cq = send_cq);
        set!(id.send_cq_channel = send_cq_channel);
        set!(id.recv_cq = recv_cq);
        set!(id.recv_cq_channel = recv_cq_channel);
        (attr.send_cq, attr.recv_cq) = given;
    }
    made
}

/// [`create_qp_on`]'s CQs (those the caller left out) and QP; on an error the CQs it made
/// are left on the id (`own_cqs`) for the caller to destroy.
///
/// As librdmacm's `rdma_create_qp_ex`, only the CQs made here (`ucma_create_cqs`) are put
/// in `id->send_cq` / `id->recv_cq`: the caller's stay out of the id, which
/// `rdma_destroy_qp` then leaves alone. Before, CQs the caller gave both were written into
/// the id and stayed there after `rdma_destroy_qp` and the caller's `ibv_destroy_cq`,
/// dangling (a program testing `id->send_cq` for NULL, as it may after librdmacm's, got a
/// freed CQ).
fn create_qp_cqs_and_qp(
    id: &Id,
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    // The caller's PD, else the id's (the device's, `attach_device`).
    let pd = if pd.is_null() { get!(id.pd) } else { pd };
    // librdmacm's ucma_create_cqs: a channel and a CQ each way the caller left out and the
    // id has none for; where the id has one (the application's), the QP takes it.
    for send in [false, true] {
        let (cq_slot, depth, of_id) = if send {
            (&mut attr.send_cq, attr.cap.max_send_wr, get!(id.send_cq))
        } else {
            (&mut attr.recv_cq, attr.cap.max_recv_wr, get!(id.recv_cq))
        };
        if !cq_slot.is_null() {
            continue;
        }
        if !of_id.is_null() {
            *cq_slot = of_id;
            continue;
        }
        // A channel or CQ refused fails the call with the errno that call set, as
        // librdmacm's ucma_create_cqs leaves libibverbs' errno (rdma-core v33,
        // "librdmacm: Don't overwrite errno returned from libibverbs"): EINVAL for a
        // depth past max_cqe, EMFILE with the descriptors used up. It was ENOMEM
        // whatever the cause.
        let ch = verbs::__wc_ibv_create_comp_channel(get!(id.verbs));
        if ch.is_null() {
            return Err(errno_or_enomem());
        }
        let cq = verbs::__wc_ibv_create_cq(
            get!(id.verbs),
            depth.max(1) as c_int,
            std::ptr::from_ref(id).cast_mut().cast(),
            ch,
            0,
        );
        if cq.is_null() {
            let e = errno_or_enomem();
            verbs::__wc_ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        *cq_slot = cq;
        if send {
            set!(id.send_cq_channel = ch);
            set!(id.send_cq = cq);
        } else {
            set!(id.recv_cq_channel = ch);
            set!(id.recv_cq = cq);
        }
        let mut st = id.lock();
        if send {
            st.own_cqs.0 = true;
        } else {
            st.own_cqs.1 = true;
        }
    }
    if attr.srq.is_null() && !get!(id.srq).is_null() {
        attr.srq = get!(id.srq);
    }
    let core = id
        .lock()
        .request
        .as_ref()
        .map(|r| usize::from(r.request.core));
    let qp = verbs::create_qp(pd, attr, core)?;
    // librdmacm's rdma_create_qp moves the new QP to INIT (ucma_init_conn_qp), which
    // rdma-core's ibv_modify_qp records in qp->state.
    verbs::set_qp_state(qp, IBV_QPS_INIT);
    set!(id.qp = qp);
    // librdmacm: the id's PD is its QP's.
    set!(id.pd = pd);
    // SAFETY: just created.
    let qid = unsafe { qp_ref(qp) }.map(|q| q.qp.id());
    id.lock().qp = qid;
    Ok(())
}

#[no_mangle]
pub extern "C" fn __wc_rdma_create_qp(
    p: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours; attr the caller's.
        let (Some(id), Some(a)) = (unsafe { p.cast::<Id>().as_ref() }, unsafe { attr.as_mut() })
        else {
            return fail(EINVAL, -1);
        };
        match create_qp_on(id, pd, a) {
            Ok(()) => 0,
            Err(e) => fail(e, -1),
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_create_qp_ex(
    p: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours; attr the caller's.
        let (Some(id), Some(a)) = (unsafe { p.cast::<Id>().as_ref() }, unsafe { attr.as_mut() })
        else {
            return fail(EINVAL, -1);
        };
        let known = IBV_QP_INIT_ATTR_PD;
        if a.comp_mask & !known != 0 || a.create_flags != 0 {
            return fail(EOPNOTSUPP, -1);
        }
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        match create_qp_on(id, pd, &mut init) {
            Ok(()) => {
                // librdmacm's rdma_create_qp_ex fills the caller's attr itself and creates
                // the QP from it (ibv_create_qp_ex writes the capabilities back): the PD
                // (the id's when none was given, IBV_QP_INIT_ATTR_PD then set), the CQs it
                // made and the id's SRQ. Before, `srq`, `pd` and `comp_mask` stayed as
                // given.
                a.cap = init.cap;
                a.send_cq = init.send_cq;
                a.recv_cq = init.recv_cq;
                a.srq = init.srq;
                a.pd = get!(id.pd);
                a.comp_mask |= IBV_QP_INIT_ATTR_PD;
                0
            }
            Err(e) => fail(e, -1),
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_destroy_qp(p: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return;
        };
        if !get!(id.qp).is_null() {
            verbs::__wc_ibv_destroy_qp(get!(id.qp));
            set!(id.qp = null_mut());
        }
        // librdmacm destroys the CQs and channels it made for the QP with it.
        let own = std::mem::take(&mut id.lock().own_cqs);
        destroy_own_cqs(id, own);
        if own.0 {
            set!(id.send_cq = null_mut());
            set!(id.send_cq_channel = null_mut());
        }
        if own.1 {
            set!(id.recv_cq = null_mut());
            set!(id.recv_cq_channel = null_mut());
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_create_srq(
    p: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        if let Err(e) = attach_device(id) {
            return fail(e, -1);
        }
        let pd = if pd.is_null() { get!(id.pd) } else { pd };
        let srq = verbs::__wc_ibv_create_srq(pd, attr);
        if srq.is_null() {
            return -1; // errno set
        }
        set!(id.srq = srq);
        0
    })
}

/// `rdma_create_srq_ex` as librdmacm does it: `EINVAL` without `IBV_SRQ_INIT_ATTR_TYPE`,
/// the id's PD where the attributes name none, then `ibv_create_srq_ex`, which for a basic
/// SRQ on a PD is `ibv_create_srq` (verbs.h) and otherwise (XRC and tag-matching SRQs)
/// needs the extended verb this library does not provide: `EOPNOTSUPP`, as verbs.h answers
/// then. The id takes the PD if it had none.
#[no_mangle]
pub extern "C" fn __wc_rdma_create_srq_ex(
    p: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours; attr the caller's.
        let (Some(id), Some(a)) = (unsafe { p.cast::<Id>().as_ref() }, unsafe { attr.as_mut() })
        else {
            return fail(EINVAL, -1);
        };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
            return fail(EINVAL, -1);
        }
        if let Err(e) = attach_device(id) {
            return fail(e, -1);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.pd = get!(id.pd);
            a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        if a.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0
            || a.srq_type != IBV_SRQT_BASIC
        {
            return fail(EOPNOTSUPP, -1);
        }
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        let srq = verbs::__wc_ibv_create_srq(a.pd, &mut basic);
        if srq.is_null() {
            return -1; // errno set
        }
        a.attr = basic.attr;
        if get!(id.pd).is_null() {
            set!(id.pd = a.pd);
        }
        set!(id.srq = srq);
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_destroy_srq(p: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return;
        };
        if !get!(id.srq).is_null() {
            verbs::__wc_ibv_destroy_srq(get!(id.srq));
            set!(id.srq = null_mut());
        }
    })
}

// ---------------------------------------------------------------- connecting

/// The private data of a connection parameter block.
///
/// # Safety
/// `param` is NULL or the caller's `rdma_conn_param`.
unsafe fn conn_pdata<'a>(param: *const rdma_conn_param) -> (&'a [u8], Option<(u8, u8)>) {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { param.as_ref() }) else {
        return (&[], None);
    };
    let pd = if c.private_data.is_null() || c.private_data_len == 0 {
        &[][..]
    } else {
        // SAFETY: private_data holds private_data_len octets (rdma_connect(3)).
        unsafe {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len))
        }
    };
    (pd, Some((c.responder_resources, c.initiator_depth)))
}

/// `responder_resources` and `initiator_depth` that ask for the device's most
/// (`RDMA_MAX_RESP_RES`, `RDMA_MAX_INIT_DEPTH`): what a NULL `rdma_conn_param` stands for.
const MOST: (u8, u8) = (RDMA_MAX_RESP_RES as u8, RDMA_MAX_INIT_DEPTH as u8);

/// `responder_resources` and `initiator_depth` of an `rdma_conn_param`, checked as
/// librdmacm checks them (rdma_connect(3), rdma_accept(3)): each at most the device's
/// `max_qp_rd_atom` / `max_qp_init_rd_atom`, else `EINVAL` (not quietly lowered), or 255
/// (`RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`), which stands for that maximum and comes
/// back as `None`.
fn ird_ord_param(
    eng: &crate::Engine,
    resp: u8,
    init: u8,
) -> Result<(Option<u16>, Option<u16>), c_int> {
    let d = eng.ctx.query_device();
    let one = |v: u8, most: u8, max: u16| -> Result<Option<u16>, c_int> {
        if v == most {
            Ok(None)
        } else if u16::from(v) > max {
            Err(EINVAL)
        } else {
            Ok(Some(u16::from(v)))
        }
    };
    Ok((
        one(resp, RDMA_MAX_RESP_RES as u8, d.max_qp_rd_atom)?,
        one(init, RDMA_MAX_INIT_DEPTH as u8, d.max_qp_init_rd_atom)?,
    ))
}

#[no_mangle]
pub extern "C" fn __wc_rdma_connect(p: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // SAFETY: the id's QP is ours.
        let Some(q) = (unsafe { qp_ref(get!(id.qp)) }) else {
            return fail(EINVAL, -1);
        };
        let Some(dst) = id.lock().dst else {
            return fail(EINVAL, -1);
        };
        // The address still being resolved: EINVAL, as the kernel's rdma_connect answers
        // an id not in ROUTE_RESOLVED (cma_comp_exch). Before, the connection started to
        // an address that had not resolved (and might never).
        if addr_query(p) {
            return fail(EINVAL, -1);
        }
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        // SAFETY: param is NULL or the caller's.
        let (pdata, io) = unsafe { conn_pdata(param) };
        // No parameters at all ask for the device's most each way, as librdmacm's
        // rdma_connect sets both to the device's maximum for a NULL conn_param.
        let (resp, init) = io.unwrap_or(MOST);
        let (ird, ord) = match ird_ord_param(eng, resp, init) {
            Ok(v) => v,
            Err(e) => return fail(e, -1),
        };
        let d = eng.ctx.query_device();
        let mut mpa = eng.mpa.clone();
        // Our IRD is what we serve (responder resources), our ORD what we issue; 255 asks
        // for the device's most. 0 is none, as in rdma_cm: an IRD of 0 has every inbound
        // Read Request answered with a Terminate, an ORD of 0 has every Read or atomic
        // posted refused (EINVAL), as siw answers one. At MPA Rev 1 too, where nothing
        // carries them: they are the QP's limits, as the kernel's providers apply
        // conn_param's ird/ord to the QP whatever the revision (siw_connect and
        // siw_proc_mpareply: irq_size/orq_size from cep->ird/ord, which only Rev 2
        // negotiation changes).
        mpa.ird = ird.unwrap_or(d.max_qp_rd_atom);
        mpa.ord = ord.unwrap_or(d.max_qp_init_rd_atom);
        // From the id's port (rdma_resolve_addr bound it), as the kernel's connection
        // uses the id's bound address and port; one whose connection to this peer is
        // still there is EADDRINUSE.
        let port = id.lock().port;
        start_connection(id, p, q, || {
            if port == 0 {
                q.qp.connect(*dst.ip(), dst.port(), &mpa, pdata)
            } else {
                q.qp.connect_from(port, *dst.ip(), dst.port(), &mpa, pdata)
            }
        })
    })
}

/// Registers the id for its QP's events, starts the connection (`rdma_connect`,
/// `rdma_accept`), and on a synchronous id waits for ESTABLISHED.
fn start_connection(
    id: &Id,
    p: *mut rdma_cm_id,
    q: &verbs::Qp,
    start: impl FnOnce() -> Result<(), wv::Error>,
) -> c_int {
    let before = registry().qps.insert(q.qp.id(), p as usize);
    // The application's moves of the QP from here on stand against ESTABLISHED's RTS.
    let mark = verbs::connection_starts(get!(id.qp));
    if let Err(e) = start() {
        verbs::connection_not_started(get!(id.qp), mark);
        // Only a registration this call made goes: a second rdma_connect or rdma_accept
        // on an id whose connection is under way or established fails (EINVAL, as the
        // kernel's state check answers it) and leaves that connection's events to come to
        // the id. Removed, as it was, the id never heard of its connection again (no
        // ESTABLISHED, DISCONNECTED or failure).
        let mut reg = registry();
        match before {
            Some(v) => reg.qps.insert(q.qp.id(), v),
            None => reg.qps.remove(&q.qp.id()),
        };
        return fail(errno_of(&e), -1);
    }
    id.lock().started = true;
    // An accepted request is answered: the exit has nothing of it to refuse.
    registry().unanswered.remove(&(p as usize));
    if is_sync(id) {
        if let Err(e) = wait_sync(id) {
            return fail(e, -1);
        }
    }
    0
}

/// At the process's normal exit (`lib.rs`'s `close_at_exit`): refuses every connection
/// request the application was told of (or whose CONNECT_REQUEST still waits unread) and
/// has not answered, as the kernel does for a process that exits holding one: the close
/// of its `/dev/infiniband/rdma_cm` descriptor destroys each id (`ucma_close`, the unread
/// requests' new ids too: `ucma_cleanup_ctx_events`), and iw_cm's `destroy_cm_id` rejects
/// a request still in IW_CM_STATE_CONN_RECV (siw: an MPA Reply with the Reject flag, then
/// the socket's close), which the peer reports as RDMA_CM_EVENT_REJECTED. Before, the
/// engine ended with the process and the peer waited for its connect timeout. Here the
/// engine's reject: MPA Reply with R = 1, then FIN (RFC 5044 §7.1.3).
///
/// Every port the process listens on stops listening first, as `ucma_close` destroys the
/// listening ids too (`rdma_destroy_id` -> `cma_cancel_listens`, iw_cm's `destroy_cm_id`
/// of a listener: `iw_destroy_listen`, which ends the connections still in their MPA
/// startup, siw's `siw_cep_put` of each pending cep): the engine's `unlisten` ends the
/// connections it holds that were never reported (MPA Request complete: a Reply with
/// R = 1; not yet arrived: RST), and a SYN after it draws a RST. Before, only the requests
/// already reported to the application were refused: a request whose MPA Request had not
/// arrived, or not yet been turned into a CONNECT_REQUEST, died with the engine and its
/// peer waited for its MPA (or connect) timeout. A request the engine reported just before
/// the unlisten, not yet dispatched, is refused by the dispatcher (`Registry::exiting`).
/// Nothing is freed; the ids stay the application's. Whether anything was refused or
/// unlistened (the exit then lets the engine run a little for the answers to leave).
pub(crate) fn refuse_requests_at_exit(ctx: &wv::Context) -> bool {
    let (reqs, ports) = {
        let mut reg = registry();
        reg.exiting = true;
        let reqs: Vec<ConnectRequest> = reg.unanswered.drain().map(|(_, r)| r).collect();
        // Taken out under the registry lock, as `rdma_listen` and `rdma_destroy_id` keep
        // them: a listener's `rdma_destroy_id` on another thread meanwhile finds its port
        // gone and unlistens nothing twice.
        let ports: Vec<u16> = listening().drain().collect();
        (reqs, ports)
    };
    let mut any = false;
    for port in ports {
        any |= ctx.unlisten(port).is_ok();
    }
    for r in &reqs {
        any |= ctx.reject(r, &[]).is_ok();
    }
    any
}

#[no_mangle]
pub extern "C" fn __wc_rdma_accept(p: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        let Some(req) = id.lock().request.clone() else {
            return fail(EINVAL, -1);
        };
        // SAFETY: the id's QP is ours.
        let Some(q) = (unsafe { qp_ref(get!(id.qp)) }) else {
            return fail(EINVAL, -1);
        };
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        // SAFETY: param is NULL or the caller's.
        let (pdata, io) = unsafe { conn_pdata(param) };
        // rdma_accept(3): our responder resources and initiator depth become the IRD and
        // ORD of the MPA Reply (RFC 6581 §9.1), capped there at the initiator's ORD and
        // IRD. 255 asks for what the request offered, as far as the device goes (its
        // most when a Rev 1 request offered nothing); 0 is none, as in rdma_cm (see
        // rdma_connect). No parameters at all are 255 each way, as librdmacm's rdma_accept
        // treats a NULL conn_param (the request's values, capped at the device's).
        let (resp, init) = io.unwrap_or(MOST);
        let (ird, ord) = match ird_ord_param(eng, resp, init) {
            Ok(v) => v,
            Err(e) => return fail(e, -1),
        };
        let d = eng.ctx.query_device();
        let ird = ird.unwrap_or_else(|| {
            req.ord
                .map_or(d.max_qp_rd_atom, |o| o.min(d.max_qp_rd_atom))
        });
        let ord = ord.unwrap_or_else(|| {
            req.ird
                .map_or(d.max_qp_init_rd_atom, |i| i.min(d.max_qp_init_rd_atom))
        });
        start_connection(id, p, q, || {
            eng.ctx
                .accept_with_ird_ord(&req, &q.qp, pdata, Some((ird, ord)))
        })
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_reject(p: *mut rdma_cm_id, pdata: *const c_void, len: u8) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { id_ref(p) }) else {
            return fail(EINVAL, -1);
        };
        let Some(req) = id.lock().request.take() else {
            return fail(EINVAL, -1);
        };
        registry().unanswered.remove(&(p as usize));
        let Ok(eng) = engine() else {
            return fail(ENODEV, -1);
        };
        let data = if pdata.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: pdata holds len octets (rdma_reject(3)).
            unsafe { std::slice::from_raw_parts(pdata.cast::<u8>(), usize::from(len)) }
        };
        match eng.ctx.reject(&req, data) {
            Ok(()) => 0,
            Err(e) => fail(errno_of(&e), -1),
        }
    })
}

/// `rdma_disconnect(3)` as librdmacm and the kernel's rdma_cm answer it on iWARP: `EINVAL`
/// for an id that never started a connection (no iWARP CM id: a new id, a resolved one, a
/// listener), 0 for a connection request's new id not yet accepted; otherwise the
/// connection closes gracefully (once: a closed or failed one is left as it is) and a
/// synchronous id waits for its DISCONNECTED (librdmacm's `ucma_complete`), which it then
/// holds in `id->event`. (librdmacm would wait forever on a synchronous id whose
/// connection already ended and whose DISCONNECTED it took; this returns 0 at once.)
#[no_mangle]
pub extern "C" fn __wc_rdma_disconnect(p: *mut rdma_cm_id) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { p.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        if get!(id.verbs).is_null() {
            return fail(EINVAL, -1);
        }
        let (started, request, ended, sync) = {
            let st = id.lock();
            (st.started, st.request.is_some(), st.ended, st.sync)
        };
        if !started {
            return if request { 0 } else { fail(EINVAL, -1) };
        }
        // SAFETY: the id's QP, if any, is ours.
        let Some(q) = (unsafe { qp_ref(get!(id.qp)) }) else {
            // The QP was destroyed (gracefully closed, its events forgotten): no event
            // will come.
            return 0;
        };
        // Closing or failed already: nothing left to disconnect (the kernel's
        // iw_cm_disconnect answers 0 in those states too).
        let _ = q.qp.disconnect();
        if sync && !ended {
            if let Err(e) = wait_sync(id) {
                return fail(e, -1);
            }
        }
        0
    })
}

/// `rdma_establish(3)` completes a connection made without a QP on the id; librdmacm
/// refuses it (`EINVAL`) on an id with a QP, where the connection completes by itself, and
/// this library makes no connection without one (`rdma_connect` needs the id's QP), so
/// there is never one to complete.
#[no_mangle]
pub extern "C" fn __wc_rdma_establish(_p: *mut rdma_cm_id) -> c_int {
    fail(EINVAL, -1)
}

/// What the kernel's rdma_cm would answer an id in its iWARP CM (`iw_cm_init_qp_attr`),
/// which `rdma_init_qp_attr` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IwState {
    /// No iWARP CM id yet (never connected, accepted or listened on).
    None,
    /// Listening: no QP attributes.
    Listen,
    /// Connecting, a request received, established, or closed and idle again.
    Usable,
    /// A graceful close in progress.
    Closing,
}

/// `rdma_init_qp_attr(3)`: librdmacm passes the state the caller asks for
/// (`qp_attr->qp_state`) to the kernel, which answers, on iWARP, with the attributes of
/// the move to it in the state the id is in (`rdma_init_qp_attr` and `iw_cm_init_qp_attr`):
/// an id without an iWARP CM id, any state: no access flags (mask state, access flags);
/// INIT or RTR: remote write and read (mask state, access flags); RTS: nothing to set
/// (mask empty); any other state, a listener's, or one closing: `EINVAL`. The port is
/// added to every answer. `Err` is the errno.
pub(crate) fn iw_qp_attr(
    iw: IwState,
    want: ibv_qp_state,
    port: u8,
    a: &mut ibv_qp_attr,
) -> Result<c_int, c_int> {
    if want > IBV_QPS_ERR {
        return Err(EINVAL);
    }
    *a = Default::default();
    a.qp_state = want;
    let mask = match iw {
        IwState::None => IBV_QP_STATE | IBV_QP_ACCESS_FLAGS,
        IwState::Listen | IwState::Closing => return Err(EINVAL),
        IwState::Usable => match want {
            IBV_QPS_INIT | IBV_QPS_RTR => {
                a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
                IBV_QP_STATE | IBV_QP_ACCESS_FLAGS
            }
            IBV_QPS_RTS => 0,
            _ => return Err(EINVAL),
        },
    };
    a.port_num = port;
    Ok((mask | IBV_QP_PORT) as c_int)
}

#[no_mangle]
pub extern "C" fn __wc_rdma_init_qp_attr(
    p: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours; attr and mask the caller's.
        let (Some(id), Some(a), Some(m)) =
            (unsafe { id_ref(p) }, unsafe { attr.as_mut() }, unsafe {
                mask.as_mut()
            })
        else {
            return fail(EINVAL, -1);
        };
        // The kernel's ucma answers only for an id bound to a device.
        if get!(id.verbs).is_null() {
            return fail(EINVAL, -1);
        }
        let iw = {
            let st = id.lock();
            if st.listening {
                IwState::Listen
            } else if st.started || st.request.is_some() {
                // SAFETY: the id's QP, if any, is ours.
                let closing = unsafe { qp_ref(get!(id.qp)) }
                    .is_some_and(|q| q.qp.state() == wv::QpState::Closing);
                if closing {
                    IwState::Closing
                } else {
                    IwState::Usable
                }
            } else {
                IwState::None
            }
        };
        match iw_qp_attr(iw, a.qp_state, get!(id.port_num), a) {
            Ok(v) => {
                *m = v;
                0
            }
            Err(e) => fail(e, -1),
        }
    })
}

// ---------------------------------------------------------------- multicast and ECE

/// The length of a socket address as librdmacm's `ucma_addrlen` takes it: 0 (invalid) for
/// NULL or a family other than IPv4, IPv6 and AF_IB.
///
/// # Safety
/// `sa` is NULL or a socket address.
unsafe fn mc_addr_valid(sa: *const sockaddr) -> bool {
    const AF_INET6: u16 = 10;
    const AF_IB: u16 = 27;
    // SAFETY: per the contract; sa_family is first in every sockaddr.
    !sa.is_null() && matches!(unsafe { (*sa).sa_family }, AF_INET | AF_INET6 | AF_IB)
}

/// Multicast needs an unreliable-datagram id (RDMA_PS_UDP or RDMA_PS_IB, UD QPs), which
/// iWARP lacks and this library never makes (`rdma_create_id` refuses other port spaces
/// than RDMA_PS_TCP): the kernel's rdma_cm refuses a join on any other id, and so every
/// join here, with `EINVAL` (`rdma_join_multicast` checks the id is bound and UD).
fn refuse_join(p: *mut rdma_cm_id, addr: *const sockaddr) -> c_int {
    // SAFETY: p is NULL or ours; addr NULL or the caller's socket address.
    if unsafe { id_ref(p) }.is_none() || !unsafe { mc_addr_valid(addr) } {
        return fail(EINVAL, -1);
    }
    eprintln!(
        "warpcore: rdma_join_multicast: multicast needs an unreliable-datagram id \
         (RDMA_PS_UDP), which iWARP does not have: ids are RDMA_PS_TCP only"
    );
    fail(EINVAL, -1)
}

#[no_mangle]
pub extern "C" fn __wc_rdma_join_multicast(
    p: *mut rdma_cm_id,
    addr: *mut sockaddr,
    _context: *mut c_void,
) -> c_int {
    guard(-1, || refuse_join(p, addr))
}

#[no_mangle]
pub extern "C" fn __wc_rdma_join_multicast_ex(
    p: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    _context: *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: attr is NULL or the caller's.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return fail(EINVAL, -1);
        };
        // librdmacm's checks of the attributes, in its order.
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return fail(EOPNOTSUPP, -1);
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return fail(EINVAL, -1);
        }
        refuse_join(p, a.addr)
    })
}

/// `rdma_leave_multicast`: librdmacm looks the address up among the id's joined groups and
/// answers `EADDRNOTAVAIL` for one it did not join; no join ever succeeds here.
#[no_mangle]
pub extern "C" fn __wc_rdma_leave_multicast(p: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard(-1, || {
        // SAFETY: p is NULL or ours; addr NULL or the caller's socket address.
        if unsafe { id_ref(p) }.is_none() || !unsafe { mc_addr_valid(addr) } {
            return fail(EINVAL, -1);
        }
        fail(EADDRNOTAVAIL, -1)
    })
}

/// `rdma_set_local_ece`: librdmacm's checks (an id without a QP, a vendor id, no
/// `comp_mask`). ECE (Enhanced Connection Establishment) travels in InfiniBand CM
/// messages only; on iWARP the kernel's rdma_cm carries nothing of it, nor does this
/// library, so the value is accepted and has no effect.
#[no_mangle]
pub extern "C" fn __wc_rdma_set_local_ece(p: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard(-1, || {
        // SAFETY: p is NULL or ours; ece NULL or the caller's.
        let (Some(id), Some(e)) = (unsafe { id_ref(p) }, unsafe { ece.as_ref() }) else {
            return fail(EINVAL, -1);
        };
        if !get!(id.qp).is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return fail(EINVAL, -1);
        }
        0
    })
}

/// `rdma_get_remote_ece`: the peer's ECE, which on iWARP no message carries: zero, as
/// librdmacm reports it there (an id with a QP is `EINVAL`, as in librdmacm).
#[no_mangle]
pub extern "C" fn __wc_rdma_get_remote_ece(p: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard(-1, || {
        // SAFETY: p is NULL or ours; ece NULL or the caller's.
        let (Some(id), Some(e)) = (unsafe { id_ref(p) }, unsafe { ece.as_mut() }) else {
            return fail(EINVAL, -1);
        };
        if !get!(id.qp).is_null() {
            return fail(EINVAL, -1);
        }
        *e = ibv_ece::default();
        0
    })
}

/// `rdma_reject_ece`: a reject whose InfiniBand reason says the ECE options are not
/// supported; an MPA reject has no reason field, so on iWARP it is `rdma_reject`.
#[no_mangle]
pub extern "C" fn __wc_rdma_reject_ece(p: *mut rdma_cm_id, pdata: *const c_void, len: u8) -> c_int {
    __wc_rdma_reject(p, pdata, len)
}

#[no_mangle]
pub extern "C" fn __wc_rdma_notify(_p: *mut rdma_cm_id, _event: ibv_event_type) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn __wc_rdma_set_option(
    p: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard(-1, || {
        // SAFETY: p is ours.
        let Some(id) = (unsafe { id_ref(p) }) else {
            return fail(EINVAL, -1);
        };
        // Type of service, IPv6-only, ACK timeout: accepted, no effect on a user-space TCP
        // that does not mark DSCP. Address reuse lets `rdma_bind_addr` share a port with
        // other ids of the process (an int, as the kernel's ucma reads it).
        match (level as u32, optname as u32) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                if optval.is_null() || optlen != std::mem::size_of::<c_int>() {
                    return fail(EINVAL, -1);
                }
                // SAFETY: optval holds an int (checked length), the caller's.
                let on = unsafe { optval.cast::<c_int>().read_unaligned() } != 0;
                id.lock().reuseaddr = on;
                0
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => 0,
            _ => fail(ENOSYS, -1),
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_get_src_port(p: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: p is ours.
        match unsafe { id_ref(p) } {
            // The union holds a sockaddr_in (we only fill AF_INET).
            Some(id) => get!(id.route.addr.__bindgen_anon_1.src_sin.sin_port),
            None => 0,
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_get_dst_port(p: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: p is ours.
        match unsafe { id_ref(p) } {
            Some(id) => get!(id.route.addr.__bindgen_anon_2.dst_sin.sin_port),
            None => 0,
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard(null_mut(), || {
        let c = verbs::context().ok();
        let n = c.map_or(0, |_| 1);
        if !num.is_null() {
            // SAFETY: num is the caller's.
            unsafe { *num = n };
        }
        let list: Box<[*mut ibv_context; 2]> = Box::new([c.unwrap_or(null_mut()), null_mut()]);
        Box::into_raw(list).cast()
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_free_devices(list: *mut *mut ibv_context) {
    guard((), || {
        if !list.is_null() {
            // SAFETY: lists come from rdma_get_devices.
            drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_context; 2]>()) });
        }
    })
}

// ---------------------------------------------------------------- addrinfo and endpoints

#[repr(C)]
struct AddrInfo {
    ai: rdma_addrinfo,
    src: sockaddr_in,
    dst: sockaddr_in,
}

/// Why [`lookup`] failed: an errno (`rdma_getaddrinfo` returns -1 with it) or the
/// system's `getaddrinfo` refused the name or service (its `EAI_*` code, which
/// `rdma_getaddrinfo` returns as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LookupErr {
    Errno(c_int),
    Gai(c_int),
}

/// `node` and `service` as an IPv4 address and port: an IPv4 literal and a numeric port
/// (or none) at once, anything else looked up by the system ([`system_lookup`]). An IPv6
/// literal is EAFNOSUPPORT at once: libfabric's verbs provider asks for every address of
/// every interface, link-local IPv6 ones included, and a name lookup of those would wait
/// on DNS.
fn lookup(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
) -> Result<SocketAddrV4, LookupErr> {
    let port = if service.is_null() {
        Some(0)
    } else {
        // SAFETY: service is NUL-terminated (rdma_getaddrinfo(3)).
        unsafe { CStr::from_ptr(service) }
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u16>().ok())
    };
    let name = if node.is_null() {
        None
    } else {
        // SAFETY: node is a NUL-terminated string (rdma_getaddrinfo(3)).
        Some(
            unsafe { CStr::from_ptr(node) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    if let Some(s) = &name {
        let literal = s.split('%').next().unwrap_or("");
        if literal.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(LookupErr::Errno(EAFNOSUPPORT));
        }
    }
    match (name.as_deref().map(str::parse::<Ipv4Addr>), port) {
        (None, Some(port)) => Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
        (Some(Ok(ip)), Some(port)) => Ok(SocketAddrV4::new(ip, port)),
        _ => system_lookup(node, service, hints),
    }
}

/// The system's `getaddrinfo(node, service)` under librdmacm's translation of the hints
/// (rdma-core v44 librdmacm/addrinfo.c, `ucma_convert_to_ai`; no hints without them), its
/// first IPv4 address. A name or service it refuses fails with its `EAI_*` code, as
/// librdmacm's rdma_getaddrinfo returns it (`ucma_getaddrinfo`: `if (ret) return ret`),
/// which rdma_client and the other librdmacm examples print with `gai_strerror`: it was
/// -1 (EHOSTUNREACH, or EINVAL for a service name or RAI_NUMERICHOST), which
/// `gai_strerror` reads as EAI_BADFLAGS, "Bad value for ai_flags". A name with IPv6
/// addresses only stays -1 with EHOSTUNREACH (the engine is IPv4).
fn system_lookup(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
) -> Result<SocketAddrV4, LookupErr> {
    let ai_hints = hints.map(|h| libc::addrinfo {
        ai_flags: if h.ai_flags & RAI_PASSIVE as c_int != 0 {
            libc::AI_PASSIVE
        } else {
            0
        } | if h.ai_flags & RAI_NUMERICHOST as c_int != 0 {
            libc::AI_NUMERICHOST
        } else {
            0
        },
        // Only AF_UNSPEC and AF_INET get here (`rdma_getaddrinfo`).
        ai_family: h.ai_family,
        ai_socktype: match h.ai_qp_type as u32 {
            IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
            IBV_QPT_UD => libc::SOCK_DGRAM,
            _ => 0,
        },
        // Only 0 and RDMA_PS_TCP get here.
        ai_protocol: if h.ai_port_space == RDMA_PS_TCP as c_int {
            libc::IPPROTO_TCP
        } else {
            0
        },
        ai_addrlen: 0,
        ai_addr: null_mut(),
        ai_canonname: null_mut(),
        ai_next: null_mut(),
    });
    let mut res: *mut libc::addrinfo = null_mut();
    // SAFETY: node and service are NULL or NUL-terminated, the hints NULL or a valid
    // addrinfo, res an out pointer.
    let ret = unsafe {
        libc::getaddrinfo(
            node,
            service,
            ai_hints
                .as_ref()
                .map_or(std::ptr::null(), std::ptr::from_ref),
            &raw mut res,
        )
    };
    if ret != 0 {
        return Err(LookupErr::Gai(ret));
    }
    let mut found = None;
    let mut at = res;
    // SAFETY: the list getaddrinfo returned, freed below, its addresses as long as their
    // ai_addrlen.
    while let Some(a) = unsafe { at.as_ref() } {
        if found.is_none() && (a.ai_addrlen as usize) >= std::mem::size_of::<sockaddr_in>() {
            // SAFETY: as above.
            if let Ok(Some(v4)) = unsafe { from_sockaddr(a.ai_addr.cast_const().cast()) } {
                found = Some(v4);
            }
        }
        at = a.ai_next;
    }
    // SAFETY: getaddrinfo's list, freed once.
    unsafe { libc::freeaddrinfo(res) };
    found.ok_or(LookupErr::Errno(EHOSTUNREACH))
}

/// An IPv4 address of the hints (`ai_src_addr`/`ai_dst_addr` with its length); None when
/// absent, EAFNOSUPPORT when it is not IPv4.
///
/// # Safety
/// `a` is NULL or valid for `len` octets.
unsafe fn hint_addr(a: *const sockaddr, len: socklen_t) -> Result<Option<SocketAddrV4>, c_int> {
    if a.is_null() || len == 0 {
        return Ok(None);
    }
    if (len as usize) < std::mem::size_of::<sockaddr_in>() {
        return Err(EINVAL);
    }
    // SAFETY: a is valid for len octets, at least a sockaddr_in (the caller's contract).
    unsafe { from_sockaddr(a.cast_mut()) }
}

/// rdma_getaddrinfo(3), as librdmacm does it: `node` and/or `service` resolved (passive:
/// the source address, else the destination); with neither, the hints alone describe the
/// endpoint (their `ai_dst_addr`, as libfabric's verbs provider asks it); a source
/// address in the hints is taken when the lookup gave none. One IPv4 entry.
#[no_mangle]
pub extern "C" fn __wc_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard(-1, || {
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return fail(EINVAL, -1);
        }
        // SAFETY: hints is NULL or the caller's.
        let h = unsafe { hints.as_ref() };
        if let Some(h) = h {
            if h.ai_family != 0 && h.ai_family != c_int::from(AF_INET) {
                return fail(EAFNOSUPPORT, -1);
            }
            if h.ai_port_space != 0 && h.ai_port_space != RDMA_PS_TCP as c_int {
                return fail(EOPNOTSUPP, -1);
            }
        }
        let passive = h.is_some_and(|h| h.ai_flags & RAI_PASSIVE as c_int != 0);
        // SAFETY: the hints' addresses are the caller's, valid for their lengths.
        let (hint_src, hint_dst) = match h.map(|h| unsafe {
            (
                hint_addr(h.ai_src_addr, h.ai_src_len),
                hint_addr(h.ai_dst_addr, h.ai_dst_len),
            )
        }) {
            None => (None, None),
            Some((Ok(s), Ok(d))) => (s, d),
            Some((Err(e), _) | (_, Err(e))) => return fail(e, -1),
        };
        let (mut src, mut dst) = (None, None);
        if !node.is_null() || !service.is_null() {
            let addr = match lookup(node, service, h) {
                Ok(a) => a,
                Err(LookupErr::Errno(e)) => return fail(e, -1),
                // librdmacm returns getaddrinfo's code as it is (errno as it left it).
                Err(LookupErr::Gai(code)) => return code,
            };
            if passive {
                src = Some(addr);
            } else {
                dst = Some(addr);
            }
        } else {
            dst = hint_dst;
        }
        src = src.or(hint_src);
        let mut b = Box::new(AddrInfo {
            ai: rdma_addrinfo {
                ai_flags: h.map_or(0, |h| h.ai_flags),
                ai_family: c_int::from(AF_INET),
                ai_qp_type: IBV_QPT_RC as c_int,
                ai_port_space: RDMA_PS_TCP as c_int,
                ..Default::default()
            },
            src: sin(src.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))),
            dst: sin(dst.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))),
        });
        let len = std::mem::size_of::<sockaddr_in>() as socklen_t;
        if src.is_some() {
            b.ai.ai_src_addr = std::ptr::addr_of_mut!(b.src).cast();
            b.ai.ai_src_len = len;
        }
        if dst.is_some() {
            b.ai.ai_dst_addr = std::ptr::addr_of_mut!(b.dst).cast();
            b.ai.ai_dst_len = len;
        }
        // SAFETY: res is the caller's.
        unsafe { *res = Box::into_raw(b).cast() };
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || {
        if !res.is_null() {
            // SAFETY: res came from rdma_getaddrinfo (one entry, no chain).
            drop(unsafe { Box::from_raw(res.cast::<AddrInfo>()) });
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: res is the caller's (from rdma_getaddrinfo).
        let (Some(r), false) = (unsafe { res.as_ref() }, out.is_null()) else {
            return fail(EINVAL, -1);
        };
        let p = match create_id(null_mut(), null_mut(), RDMA_PS_TCP) {
            Ok(p) => p,
            Err(e) => return fail(e, -1),
        };
        let pid = p.cast::<rdma_cm_id>();
        let cleanup = |e: c_int| {
            __wc_rdma_destroy_id(pid);
            fail(e, -1)
        };
        if r.ai_flags & RAI_PASSIVE as c_int != 0 {
            if __wc_rdma_bind_addr(pid, r.ai_src_addr) != 0 {
                return cleanup(errno());
            }
            // SAFETY: p is the id just made.
            let id = unsafe { &*pid.cast::<Id>() };
            if !pd.is_null() {
                set!(id.pd = pd);
            }
            // SAFETY: qp_attr is NULL or the caller's.
            id.lock().ep_attr = unsafe { qp_attr.as_ref() }.map(|a| ibv_qp_init_attr {
                // librdmacm takes the QP type from the address information.
                qp_type: ep_qp_type(r),
                ..*a
            });
        } else {
            if __wc_rdma_resolve_addr(pid, r.ai_src_addr, r.ai_dst_addr, 2000) != 0
                || __wc_rdma_resolve_route(pid, 2000) != 0
            {
                return cleanup(errno());
            }
            // SAFETY: p is the id just made.
            let id = unsafe { &*pid.cast::<Id>() };
            if !pd.is_null() {
                set!(id.pd = pd);
            }
            // SAFETY: qp_attr is NULL or the caller's.
            if let Some(a) = unsafe { qp_attr.as_mut() } {
                a.qp_type = ep_qp_type(r);
                if let Err(e) = create_qp_on(id, pd, a) {
                    return cleanup(e);
                }
            }
        }
        // SAFETY: out is the caller's.
        unsafe { *out = pid };
        0
    })
}

/// The QP type `rdma_create_ep` gives the QP: the address information's.
fn ep_qp_type(r: &rdma_addrinfo) -> ibv_qp_type {
    match r.ai_qp_type {
        0 => IBV_QPT_RC,
        t => t as ibv_qp_type,
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(EINVAL)
}

/// The calling thread's errno as a call of ours that failed left it, or `ENOMEM` if it left
/// none.
fn errno_or_enomem() -> c_int {
    match errno() {
        e if e > 0 => e,
        _ => crate::ENOMEM,
    }
}

#[no_mangle]
pub extern "C" fn __wc_rdma_destroy_ep(p: *mut rdma_cm_id) {
    guard((), || {
        __wc_rdma_destroy_qp(p);
        __wc_rdma_destroy_srq(p);
        __wc_rdma_destroy_id(p);
    })
}

#[no_mangle]
pub extern "C" fn __wc_rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    guard(-1, || {
        // SAFETY: listen is ours.
        let Some(l) = (unsafe { listen.cast::<Id>().as_ref() }) else {
            return fail(EINVAL, -1);
        };
        if out.is_null() || !l.lock().sync {
            return fail(EINVAL, -1);
        }
        // librdmacm acknowledges the event the id held from its last call first.
        release_event(l);
        let Some(ch) = chan_of(l) else {
            return fail(EINVAL, -1);
        };
        let e = match ch.take() {
            Ok(e) => e,
            Err(e) => return fail(e, -1),
        };
        // SAFETY: an event of ours, taken off the channel: only this call has it.
        let (kind, status, child) = unsafe { ((*e).ev.event, (*e).ev.status, (*e).ev.id) };
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            // Whatever came instead, librdmacm's rdma_get_request answers and keeps in
            // `listen->event`: a REJECTED is ECONNREFUSED, an error status its errno,
            // any other event EINVAL (an id that does not listen: the DISCONNECTED of a
            // synchronous connection, say). Before, the event was dropped unseen and
            // the call waited on for a request that would never come.
            keep_event(l, e);
            let err = match sync_result(kind, status) {
                Err(err) => err,
                Ok(()) => EINVAL,
            };
            return fail(err, -1);
        }
        // The new id of a synchronous listener's request gets its own channel now, as
        // librdmacm's `ucma_process_conn_req` migrates it to none (until now it was on
        // the listener's, where it cost no descriptor).
        if __wc_rdma_migrate_id(child, null_mut()) != 0 {
            let err = errno();
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(e) });
            __wc_rdma_reject(child, std::ptr::null(), 0);
            __wc_rdma_destroy_id(child);
            return fail(err, -1);
        }
        // SAFETY: the child id the dispatcher made for the request.
        let c = unsafe { &*child.cast::<Id>() };
        let attr = l.lock().ep_attr;
        if let Some(mut a) = attr {
            if let Err(err) = create_qp_on(c, get!(l.pd), &mut a) {
                // SAFETY: as above.
                drop(unsafe { Box::from_raw(e) });
                __wc_rdma_reject(child, std::ptr::null(), 0);
                __wc_rdma_destroy_id(child);
                return fail(err, -1);
            }
        }
        // rdma_get_request(3): the new id references the request's event (its private
        // data, IRD/ORD) until it is accepted, rejected or destroyed.
        keep_event(c, e);
        // SAFETY: out is the caller's.
        unsafe { *out = child };
        0
    })
}

/// Queues an event on an id's channel (unit tests of the channel).
#[cfg(test)]
pub(crate) fn post_test_event(id: *mut rdma_cm_id, kind: rdma_cm_event_type) {
    // SAFETY: a live id of the test's.
    let i = unsafe { id_ref(id) }.expect("an id");
    chan_of(i)
        .expect("a channel")
        .post(new_event(id, null_mut(), kind, 0, &[], (0, 0)));
}

#[cfg(test)]
mod failure_tests {
    use super::*;
    use warpcore_proto::mpa::negotiation::NegotiationError as N;
    use wv::ConnError as C;

    /// The kernel's rdma_cm's reading of an iWARP provider's failed-connection status
    /// (`cma_iw_handler`, IW_CM_EVENT_CONNECT_REPLY).
    fn kernel_kind(status: c_int) -> rdma_cm_event_type {
        match -status {
            ECONNRESET | ECONNREFUSED => RDMA_CM_EVENT_REJECTED,
            ETIMEDOUT => RDMA_CM_EVENT_UNREACHABLE,
            _ => RDMA_CM_EVENT_CONNECT_ERROR,
        }
    }

    /// A connection that fails before it is established is reported as rdma_cm reports it
    /// on iWARP: an MPA startup timeout is UNREACHABLE/-ETIMEDOUT (siw's and cxgb4's MPA
    /// timer), the peer closing during the startup REJECTED/-ECONNRESET, a protocol failure
    /// CONNECT_ERROR; and every event agrees with its status as the kernel reads the status.
    /// (Before, a startup timeout was CONNECT_ERROR with -ECONNRESET, which the kernel
    /// would have reported as REJECTED.)
    #[test]
    fn connect_failures_map_as_rdma_cm_on_iwarp() {
        assert_eq!(
            failure_event(&C::Negotiation {
                error: N::Timeout,
                peer_ird_ord: None
            }),
            (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT)
        );
        assert_eq!(
            failure_event(&C::Negotiation {
                error: N::PeerClosed,
                peer_ird_ord: None
            }),
            (RDMA_CM_EVENT_REJECTED, -ECONNRESET)
        );
        for e in [
            N::InvalidRtr,
            N::NoMatchingRtr,
            N::ModelMismatch,
            N::InsufficientIrd,
            N::MarkersUnsupported,
            N::UnsupportedRevision(3),
        ] {
            assert_eq!(
                failure_event(&C::Negotiation {
                    error: e,
                    peer_ird_ord: None
                }),
                (RDMA_CM_EVENT_CONNECT_ERROR, -EPROTO),
                "{e:?}"
            );
        }
        assert_eq!(
            failure_event(&C::CqOverrun),
            (RDMA_CM_EVENT_CONNECT_ERROR, -crate::EIO)
        );
        assert_eq!(
            failure_event(&C::TcpReset),
            (RDMA_CM_EVENT_REJECTED, -ECONNREFUSED)
        );
        assert_eq!(
            failure_event(&C::TcpTimedOut),
            (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT)
        );
        // cxgb4's ARP miss at connect time: -EHOSTUNREACH, CONNECT_ERROR (not the
        // UNREACHABLE/-ETIMEDOUT of a SYN nobody answered).
        assert_eq!(
            failure_event(&C::NeighborUnresolved),
            (RDMA_CM_EVENT_CONNECT_ERROR, -EHOSTUNREACH)
        );
        for e in [
            C::TcpReset,
            C::TcpTimedOut,
            C::NeighborUnresolved,
            C::Negotiation {
                error: N::Timeout,
                peer_ird_ord: None,
            },
            C::Negotiation {
                error: N::PeerClosed,
                peer_ird_ord: None,
            },
            C::Negotiation {
                error: N::InvalidRtr,
                peer_ird_ord: None,
            },
            C::CqOverrun,
        ] {
            let (kind, status) = failure_event(&e);
            assert_eq!(kind, kernel_kind(status), "{e:?}: status {status}");
        }
    }

    /// A connection that ends (the engine's `Disconnected`) before its id saw ESTABLISHED
    /// gets the event the kernel's rdma_cm gives the status an iWARP provider reports for
    /// it (`cma_iw_handler`, IW_CM_EVENT_CONNECT_REPLY): the peer's close or reset
    /// REJECTED/-ECONNRESET, a TCP timeout UNREACHABLE/-ETIMEDOUT, the application's own
    /// move of the QP to ERR CONNECT_ERROR/-EINVAL (siw's `siw_qp_cm_drop`). Before, every
    /// cause was CONNECT_ERROR, with -ECONNRESET (a status the kernel reports as REJECTED)
    /// or -ENOTCONN.
    #[test]
    fn closed_before_established_maps_as_rdma_cm_on_iwarp() {
        use wv::DisconnectCause as D;
        assert_eq!(
            closed_before_established(D::Reset, false),
            (RDMA_CM_EVENT_REJECTED, -ECONNRESET)
        );
        assert_eq!(
            closed_before_established(D::Closed, false),
            (RDMA_CM_EVENT_REJECTED, -ECONNRESET)
        );
        assert_eq!(
            closed_before_established(D::TimedOut, false),
            (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT)
        );
        assert_eq!(
            closed_before_established(D::CloseTimedOut, false),
            (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT)
        );
        for cause in [D::Reset, D::Closed, D::TimedOut, D::CloseTimedOut] {
            assert_eq!(
                closed_before_established(cause, true),
                (RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL),
                "{cause:?} after our own abort"
            );
            for ours in [false, true] {
                let (kind, status) = closed_before_established(cause, ours);
                assert_eq!(
                    kind,
                    kernel_kind(status),
                    "{cause:?} (ours: {ours}): status {status}"
                );
            }
        }
    }
}

#[cfg(test)]
mod channel_tests {
    use super::*;

    fn readable_now(fd: c_int) -> bool {
        let mut p = verbs::PollFd {
            fd,
            events: 1,
            revents: 0,
        };
        extern "C" {
            fn poll(fds: *mut verbs::PollFd, n: u64, timeout: c_int) -> c_int;
        }
        // SAFETY: one valid pollfd (the test's own), no wait.
        unsafe { poll(&mut p, 1, 0) == 1 && p.revents & 1 != 0 }
    }

    /// rdma_get_cm_event(3) on a descriptor poll(2) reported readable returns an event: the
    /// channel's descriptor is readable exactly while an event waits. A reader takes its
    /// token before it locks the queue; when another path (rdma_destroy_id's purge, a
    /// withdrawn connection request, rdma_migrate_id) took the event meanwhile and a new
    /// one was queued, the reader's pop of the new one left a token behind with the queue
    /// empty, and every later event added one more: poll() said readable with nothing
    /// queued, and rdma_get_cm_event then blocked.
    #[test]
    fn no_spurious_token_after_another_path_took_the_event() {
        let ch = Chan::new().expect("a channel");
        // SAFETY: the channel just made, freed at the end.
        let c = unsafe { &*ch };
        let fd = c.ch.fd;
        let (a, b) = (0x1000 as *mut rdma_cm_id, 0x2000 as *mut rdma_cm_id);
        let ev = |id| new_event(id, null_mut(), RDMA_CM_EVENT_ADDR_RESOLVED, 0, &[], (0, 0));
        c.post(ev(a));
        assert!(readable_now(fd));
        // A reader in rdma_get_cm_event has read the token, not yet locked the queue ...
        assert_eq!(c.read_token(), Ok(()));
        // ... when another path takes the event and a new one is queued.
        let gone = c.take_where(|e| e.id == a);
        assert_eq!(gone.len(), 1);
        c.post(ev(b));
        // The reader goes on: it takes the new one.
        let got = c.pop_after_token(&mut |_| {}).expect("the queued event");
        // SAFETY: the event just taken.
        assert_eq!(unsafe { (*got).ev.id }, b);
        assert!(
            !readable_now(fd),
            "the descriptor is readable with no event queued"
        );
        // The next event makes it readable, and taking it leaves it unreadable again.
        c.post(ev(a));
        let next = c.take().expect("the next event");
        assert!(!readable_now(fd), "readable after the last event was taken");
        for e in gone.into_iter().chain([got, next]) {
            // SAFETY: events of the test's, taken off the queue.
            drop(unsafe { Box::from_raw(e) });
        }
        // SAFETY: the channel is the test's; no id is on it.
        unsafe { chan_free(ch.cast()) };
    }
}
