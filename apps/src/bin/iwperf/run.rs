//! Connections and the test loops of both roles.
//!
//! Each QP has three regions per side: `data` (the peer's RDMA Write target, RDMA Read
//! source, or the Send sink), `src` (our Write/Send source and Read sink) and `ctrl` (control
//! receive slots, control send slots and the credit word). Latency tests ping-pong one
//! message at a time; bandwidth tests keep up to `-t` work requests in flight per QP.
//! Sends are flow-controlled by credits: a receiver RDMA-Writes the number of receives it
//! has re-posted into the sender's credit word, since an iWARP Send without a posted
//! receive is a fatal error (no RNR retry as in InfiniBand).

use std::time::{Duration, Instant};

use warpcore_verbs::{
    Access, CmEvent, CompletionQueue, Context, Established, MemoryRegion, MpaParams,
    ProtectionDomain, QpInit, QueuePair, RecvWr, SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::cli::TestName;
use crate::wire::{self, Ctrl, Hello, CLIENT_SALT, CTRL_LEN, SERVER_SALT};

const CTRL_RECV_SLOTS: u64 = 8;
const CTRL_SEND_OFF: u64 = 1024;
const CTRL_SEND_SLOTS: u64 = 4;
const CREDIT_SRC_OFF: usize = 1536;
const CREDIT_OFF: usize = 2048;
const MARGIN: u64 = 8192;

/// What both sides derive identically from the client's hello.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Test.
    pub test: TestName,
    /// Largest message size of the run.
    pub max_size: u64,
    /// Work requests in flight per QP (bandwidth tests).
    pub tx_depth: u64,
    /// Verify data.
    pub verify: bool,
    /// Bidirectional.
    pub bidir: bool,
    /// Length of the data and src regions.
    pub data_len: u64,
    /// Receive slot stride (send tests).
    pub stride: u64,
    /// Distinct receive slots (send tests).
    pub distinct: u64,
    /// Receives kept posted.
    pub rq: u64,
    /// The options that change what goes on the wire.
    pub opts: Opts,
}

/// Options of a run both sides must know (carried in the hello).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opts {
    /// Write tests use RDMA Write with Immediate Data.
    pub imm: bool,
    /// Atomic tests use CmpSwap (else FetchAdd).
    pub cmp_swap: bool,
    /// Messages up to this size are posted inline.
    pub inline: u32,
    /// -r: receives kept posted by the side that receives data (0: iwperf's default).
    pub rx_depth: u32,
}

impl Layout {
    /// Whether a client's Start may run a phase of `size` octets on this layout: between
    /// 1 and the largest size its hello announced (the data region is sized for that).
    /// The client's own checks keep it there; a peer that breaks them gets this error
    /// instead of a phase that would index outside its buffers.
    pub fn check_start_size(&self, size: u64) -> Result<(), String> {
        if size == 0 || size > self.max_size {
            return Err(format!(
                "the client's Start asks for {size}-octet messages; its hello announced 1 to {}",
                self.max_size
            ));
        }
        Ok(())
    }

    /// The layout of a run.
    pub fn new(
        test: TestName,
        max_size: u64,
        tx_depth: u64,
        verify: bool,
        bidir: bool,
        opts: Opts,
    ) -> Self {
        let slots = tx_depth.max(3);
        let cap = (32u64 << 20).max(3 * max_size);
        let data_len = (max_size * slots).min(cap).max(64 << 10) + MARGIN;
        let stride = max_size.max(CTRL_LEN as u64).div_ceil(64) * 64;
        let distinct = ((data_len - MARGIN) / stride).max(1);
        let rq = if test.is_send() || opts.imm {
            let want = if opts.rx_depth > 0 {
                u64::from(opts.rx_depth)
            } else if test.is_bw() {
                (tx_depth * 2).clamp(16, 512)
            } else {
                16
            };
            if verify && test.is_send() {
                want.min(distinct)
            } else {
                want
            }
        } else {
            CTRL_RECV_SLOTS
        };
        Layout {
            test,
            max_size,
            tx_depth,
            verify,
            bidir,
            data_len,
            stride,
            distinct,
            rq,
            opts,
        }
    }

    /// Data messages consume the peer's receives, so the sender needs its credit: Sends,
    /// and RDMA Writes with Immediate Data.
    pub fn credits(&self) -> bool {
        self.test.is_send() || self.opts.imm
    }

    /// Whether a message of `size` octets goes inline.
    pub fn inline(&self, size: u64) -> bool {
        size <= u64::from(self.opts.inline)
    }

    /// Write/Read slots for messages of `size` octets.
    pub fn slots(&self, size: u64) -> u64 {
        ((self.data_len - MARGIN) / size.max(1))
            .min(self.tx_depth)
            .max(1)
    }

    /// Remote offset of Read `i` (shifted per iteration so that a stale sink shows).
    pub fn read_offset(&self, size: u64, i: u64) -> u64 {
        (i % self.slots(size)) * size + (i % 64) * 64
    }
}

/// What differed in a failed check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Differ {
    /// A data octet at `at` held `got` instead of `want`.
    Octet {
        /// Offset in the message.
        at: u64,
        /// The sender's pattern.
        want: u8,
        /// What arrived.
        got: u8,
    },
    /// A Send arrived with `got` octets instead of the message size `want`.
    Length {
        /// Received length.
        got: u64,
        /// Message size.
        want: u64,
    },
    /// A value (immediate data, an atomic's original value, the counter word) differed.
    Value {
        /// Which value.
        what: ValueKind,
        /// What was seen.
        got: u64,
        /// What should have been.
        want: u64,
    },
}

/// The values a run checks besides data octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// An RDMA Write with Immediate Data's immediate value.
    Imm,
    /// An atomic's original value in its completion.
    AtomicOrig,
    /// An atomic's original value in its 8-octet sink.
    AtomicSink,
    /// The server's counter word after the atomics of a phase.
    Counter,
}

impl ValueKind {
    fn code(self) -> u64 {
        match self {
            ValueKind::Imm => 3,
            ValueKind::AtomicOrig => 4,
            ValueKind::AtomicSink => 5,
            ValueKind::Counter => 6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ValueKind::Imm => "immediate data",
            ValueKind::AtomicOrig => "original value (completion)",
            ValueKind::AtomicSink => "original value (sink)",
            ValueKind::Counter => "counter word",
        }
    }
}

/// The first failed check of a run: which message, what differed, and whether the peer
/// found it (reported in a `Mismatch` control message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Message number (per QP, from 0); for the counter word, the atomics counted.
    pub msg: u64,
    /// Message size.
    pub size: u64,
    /// What differed.
    pub what: Differ,
    /// Found by the peer (the server, seen from the client).
    pub by_peer: bool,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.what {
            Differ::Octet { at, want, got } => write!(
                f,
                "message {} ({} octets): octet {at} is {got:#04x}, expected {want:#04x}",
                self.msg, self.size
            ),
            Differ::Length { got, want } => write!(
                f,
                "message {}: received length {got} octets, expected {want}",
                self.msg
            ),
            Differ::Value {
                what: ValueKind::Counter,
                got,
                want,
            } => write!(
                f,
                "counter word after {} atomics is {got}, expected {want}",
                self.msg
            ),
            Differ::Value { what, got, want } => write!(
                f,
                "message {}: {} is {got}, expected {want}",
                self.msg,
                what.name()
            ),
        }?;
        if self.by_peer {
            write!(f, " (found by the server)")?;
        }
        Ok(())
    }
}

impl Mismatch {
    /// The control message that reports it to the peer.
    pub fn to_ctrl(self) -> Ctrl {
        let mut c = Ctrl::new(wire::Kind::Mismatch, self.size, self.msg);
        match self.what {
            Differ::Octet { at, want, got } => {
                c.duration_ns = 1;
                c.v0 = at;
                c.v1 = u64::from(want);
                c.v2 = u64::from(got);
            }
            Differ::Length { got, want } => {
                c.duration_ns = 2;
                c.v0 = got;
                c.v1 = want;
            }
            Differ::Value { what, got, want } => {
                c.duration_ns = what.code();
                c.v0 = got;
                c.v1 = want;
            }
        }
        c
    }

    /// Decodes the peer's report; `None` for an unknown code (reported as malformed).
    pub fn from_ctrl(c: &Ctrl) -> Option<Mismatch> {
        let value = |what| Differ::Value {
            what,
            got: c.v0,
            want: c.v1,
        };
        let what = match c.duration_ns {
            1 => Differ::Octet {
                at: c.v0,
                want: u8::try_from(c.v1).ok()?,
                got: u8::try_from(c.v2).ok()?,
            },
            2 => Differ::Length {
                got: c.v0,
                want: c.v1,
            },
            3 => value(ValueKind::Imm),
            4 => value(ValueKind::AtomicOrig),
            5 => value(ValueKind::AtomicSink),
            6 => value(ValueKind::Counter),
            _ => return None,
        };
        Some(Mismatch {
            msg: c.iters,
            size: c.size,
            what,
            by_peer: true,
        })
    }
}

/// A received message.
#[derive(Debug)]
pub enum Recv {
    /// A send test's data message (already verified, receive re-posted).
    Data,
    /// The immediate data of RDMA Write number `.0` (its value checked, receive re-posted).
    Imm(u64),
    /// A control message.
    Ctrl(Ctrl),
}

/// One connected QP and its regions.
pub struct Conn {
    /// The queue pair.
    pub qp: QueuePair,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    /// Peer's RDMA target / Read source.
    pub data: MemoryRegion,
    /// Our source / Read sink.
    pub src: MemoryRegion,
    ctrl: MemoryRegion,
    /// The peer's hello.
    pub peer: Hello,
    /// The peer's address (server side).
    pub peer_ip: Option<std::net::Ipv4Addr>,
    /// What the connection negotiated.
    pub est: Option<Established>,
    lay: Layout,
    peer_salt: u64,
    recv_posted: u64,
    consumed: u64,
    credit_sent: u64,
    sent: u64,
    ctrl_sent: u64,
    data_rx: u64,
    /// Verification errors seen on this QP.
    pub errors: u64,
    /// Messages verified on this QP.
    pub verified: u64,
    /// The first verification error, for the report.
    pub first_error: Option<Mismatch>,
    /// Size of the current phase's messages (a received Send must have exactly this length).
    pub msg_size: u64,
    /// Atomics executed on the server's counter word of this QP in earlier phases.
    pub atomics: u64,
    /// Staging buffer of inline posts.
    pub scratch: Vec<u8>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn(qp {:?})", self.qp.id())
    }
}

fn status_err(op: WcOpcode, s: WcStatus) -> String {
    format!("{op:?} work request completed with {s:?} (the connection failed)")
}

fn e2s(e: warpcore_verbs::Error) -> String {
    e.to_string()
}

thread_local! {
    /// -e: this thread's completion channel and the queues that signal it.
    static EVENTS: std::cell::RefCell<Option<(warpcore_verbs::CompletionChannel, Vec<CompletionQueue>)>> =
        const { std::cell::RefCell::new(None) };
}

/// -e: from now on this thread's completion queues signal a completion channel, and its
/// waiting loops sleep on it ([`Spin::pause`]) instead of polling.
pub fn use_events(ctx: &Context) -> Result<(), String> {
    let ch = ctx.create_comp_channel().map_err(|e| format!("-e: {e}"))?;
    EVENTS.with(|e| *e.borrow_mut() = Some((ch, Vec::new())));
    Ok(())
}

/// Stops sleeping on a completion channel (before the context is dropped).
pub fn stop_events() {
    EVENTS.with(|e| *e.borrow_mut() = None);
}

/// A completion queue of `depth`, on this thread's completion channel under -e.
pub fn new_cq(ctx: &Context, depth: usize) -> Result<CompletionQueue, String> {
    EVENTS.with(|e| match e.borrow_mut().as_mut() {
        Some((ch, cqs)) => {
            let cq = ctx.create_cq_with_channel(depth, ch).map_err(e2s)?;
            cqs.push(cq.clone());
            Ok(cq)
        }
        None => ctx.create_cq(depth).map_err(e2s),
    })
}

/// -e, when a loop found nothing: the first time, arm every queue (the loop then polls
/// once more, catching what came before the arming); the next time, sleep until one of
/// them signals (at most 10 ms, for loops that also watch something else). Returns
/// false without events.
fn events_pause(idle: u32) -> bool {
    EVENTS.with(|e| match e.borrow().as_ref() {
        Some((ch, cqs)) => {
            if idle <= 1 {
                for cq in cqs {
                    let _ = cq.req_notify(false);
                }
            } else {
                let _ = ch.get_event(Some(Duration::from_millis(10)));
            }
            true
        }
        None => false,
    })
}

thread_local! {
    /// The caller-driven engine this thread runs (`--poll-mode caller`), if any.
    static DRIVEN: std::cell::RefCell<Option<Context>> = const { std::cell::RefCell::new(None) };
}

/// Makes this thread run `ctx`'s engine cores whenever it waits ([`Spin::pause`]); the
/// completion-queue polls of a caller-driven context run them on their own.
pub fn drive_on_this_thread(ctx: &Context) {
    DRIVEN.with(|d| *d.borrow_mut() = Some(ctx.clone()));
}

/// Stops running an engine on this thread (before the context is dropped).
pub fn stop_driving() {
    DRIVEN.with(|d| *d.borrow_mut() = None);
}

/// What a waiting loop does when it found nothing: run the caller-driven engine if this
/// thread has one, spin briefly, then yield (two busy-polling processes, and their engine
/// threads in threaded mode, share few CPUs on small machines).
#[derive(Debug, Default)]
pub struct Spin(u32);

fn spin_pause() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("IWPERF_SPIN_PAUSE").is_some_and(|v| v == "1"))
}

impl Spin {
    /// Work was found.
    pub fn reset(&mut self) {
        self.0 = 0;
    }
    /// Nothing to do this time.
    pub fn pause(&mut self) {
        // -e: arm, then sleep on the completion channel.
        self.0 = self.0.saturating_add(1);
        if events_pause(self.0) {
            if self.0 > 1 {
                self.0 = 0;
            }
            return;
        }
        self.0 -= 1;
        // Caller-driven, this thread is the engine: it polls like perftest (and like any
        // DPDK lcore) and yields only after a long idle stretch (about a millisecond), so
        // a message that arrives while it waits is seen at once, not after another
        // process's time slice. With engine threads, it yields early to let them run.
        let limit = match DRIVEN.with(|d| d.borrow().as_ref().map(Context::progress)) {
            Some(true) => {
                self.0 = 0;
                return;
            }
            Some(false) => CALLER_YIELD_AFTER,
            None => 512,
        };
        self.0 = self.0.saturating_add(1);
        if self.0 < limit {
            // Caller-driven, the engine poll just made is the wait; a PAUSE on top only
            // delays noticing the next message (IWPERF_SPIN_PAUSE=1 restores it, to compare).
            if limit != CALLER_YIELD_AFTER || spin_pause() {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
    }
}

/// Idle engine loops in a row after which a caller-driven waiter yields its CPU (about a
/// millisecond): [`Spin::pause`] and [`Spin::wait_until`].
const CALLER_YIELD_AFTER: u32 = 20_000;

/// Engine loops per [`Spin::wait_until`] call: the caller looks at its own stall limit and
/// receive queue between calls.
const WAIT_LOOPS: u32 = 32;

impl Spin {
    /// Waits for `done` (a quick test, such as an octet of a region an RDMA Write will
    /// change) for a while: caller-driven, up to [`WAIT_LOOPS`] engine loops on this thread
    /// under one hold of the core ([`Context::progress_until`]), yielding after
    /// [`CALLER_YIELD_AFTER`] loops or calls in a row without `done`, as [`Spin::pause`];
    /// else (engine threads, `-e`) one `done` test and one pause. Returns whether `done`
    /// returned true.
    pub fn wait_until(&mut self, mut done: impl FnMut() -> bool) -> bool {
        let events = EVENTS.with(|e| e.borrow().is_some());
        let idle = &mut self.0;
        let driven = DRIVEN.with(|d| {
            d.borrow().as_ref().filter(|_| !events).map(|ctx| {
                let mut met = false;
                ctx.progress_until(WAIT_LOOPS, || {
                    met = done();
                    *idle = idle.saturating_add(1);
                    met || *idle >= CALLER_YIELD_AFTER
                });
                met
            })
        });
        match driven {
            Some(true) => {
                self.0 = 0;
                true
            }
            Some(false) => {
                // Counted here too: a core another thread holds runs no loop for us.
                self.0 = self.0.saturating_add(1);
                if self.0 >= CALLER_YIELD_AFTER {
                    self.0 = 0;
                    std::thread::yield_now();
                }
                false
            }
            None if done() => {
                self.reset();
                true
            }
            None => {
                self.pause();
                false
            }
        }
    }
}

struct Regions {
    data: MemoryRegion,
    src: MemoryRegion,
    ctrl: MemoryRegion,
    qp: QueuePair,
    scq: CompletionQueue,
    rcq: CompletionQueue,
}

fn regions(
    pd: &ProtectionDomain,
    ctx: &Context,
    lay: &Layout,
    core: Option<usize>,
) -> Result<Regions, String> {
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let data_access = if lay.test.is_atomic() {
        remote | Access::REMOTE_ATOMIC
    } else {
        remote
    };
    let data = pd
        .alloc_mr(lay.data_len as usize, data_access)
        .map_err(e2s)?;
    let src = pd
        .alloc_mr(lay.data_len as usize, Access::LOCAL_WRITE)
        .map_err(e2s)?;
    let ctrl = pd.alloc_mr(4096, remote).map_err(e2s)?;
    let scq = new_cq(ctx, 4096)?;
    let rcq = new_cq(ctx, 4096)?;
    let mut init = QpInit::new(&scq, &rcq);
    init.sq_depth = (lay.tx_depth as u32 + 16).min(1024);
    init.rq_depth = (lay.rq as u32 + 4).min(1024);
    init.core = core;
    init.max_inline = init.max_inline.max(lay.opts.inline);
    let qp = pd.create_qp(&init).map_err(e2s)?;
    if lay.test.is_read() {
        // A static pattern the reader checks at every (shifted) offset.
        let salt = if core.is_some() {
            SERVER_SALT
        } else {
            CLIENT_SALT
        };
        let mut buf = vec![0u8; lay.data_len as usize];
        wire::fill(&mut buf, salt, 0);
        data.write(0, &buf).map_err(e2s)?;
    }
    Ok(Regions {
        data,
        src,
        ctrl,
        qp,
        scq,
        rcq,
    })
}

impl Conn {
    fn new(r: Regions, peer: Hello, lay: Layout, server: bool) -> Conn {
        Conn {
            qp: r.qp,
            scq: r.scq,
            rcq: r.rcq,
            data: r.data,
            src: r.src,
            ctrl: r.ctrl,
            peer,
            peer_ip: None,
            est: None,
            lay,
            peer_salt: if server { CLIENT_SALT } else { SERVER_SALT },
            recv_posted: 0,
            consumed: 0,
            credit_sent: 0,
            sent: 0,
            ctrl_sent: 0,
            data_rx: 0,
            errors: 0,
            verified: 0,
            first_error: None,
            msg_size: 0,
            atomics: 0,
            scratch: Vec::new(),
        }
    }

    fn recv_wr(
        lay: &Layout,
        k: u64,
        data: &MemoryRegion,
        ctrl: &MemoryRegion,
    ) -> Result<RecvWr, String> {
        let sge = if lay.test.is_send() {
            data.sge((k % lay.distinct) * lay.stride, lay.stride as u32)
        } else {
            ctrl.sge((k % CTRL_RECV_SLOTS) * CTRL_LEN as u64, CTRL_LEN as u32)
        };
        RecvWr::new(k, &[sge]).map_err(e2s)
    }

    fn post_recv(&mut self) -> Result<(), String> {
        let wr = Conn::recv_wr(&self.lay, self.recv_posted, &self.data, &self.ctrl)?;
        self.qp.post_recv(&wr).map_err(e2s)?;
        self.recv_posted += 1;
        Ok(())
    }

    /// The peer's receives we may still consume (send tests).
    fn credit_left(&self) -> u64 {
        let seen = u64::from_le(
            self.ctrl
                .atomic_u64(CREDIT_OFF)
                .map(|a| a.load(std::sync::atomic::Ordering::Acquire))
                .unwrap_or(0),
        );
        (seen + self.lay.rq).saturating_sub(self.sent)
    }

    fn post_send(&mut self, wr: &SendWr) -> Result<(), String> {
        let mut spin = Spin::default();
        loop {
            match self.qp.post_send(wr) {
                Ok(()) => return Ok(()),
                Err(warpcore_verbs::Error::QueueFull) => {
                    self.check_send_errors()?;
                    spin.pause()
                }
                Err(e) => return Err(format!("post: {e}")),
            }
        }
    }

    fn check_send_errors(&self) -> Result<(), String> {
        // Only unsignalled requests are posted where this is called, so any entry is an error.
        if let Some(c) = self.scq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(status_err(c.opcode, c.status));
            }
        }
        Ok(())
    }

    /// Sends a control message (Send with Solicited Event).
    pub fn send_ctrl(&mut self, c: Ctrl, deadline: Duration) -> Result<(), String> {
        if self.lay.credits() {
            self.wait_credit(deadline)?;
        }
        let off = CTRL_SEND_OFF + (self.ctrl_sent % CTRL_SEND_SLOTS) * CTRL_LEN as u64;
        self.ctrl.write(off as usize, &c.encode()).map_err(e2s)?;
        let wr = SendWr::new(
            u64::MAX,
            SendOp::SendSe,
            &[self.ctrl.sge(off, CTRL_LEN as u32)],
        )
        .map_err(e2s)?
        .unsignaled();
        self.post_send(&wr)?;
        self.ctrl_sent += 1;
        self.sent += 1;
        Ok(())
    }

    fn wait_credit(&mut self, timeout: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        let mut spin = Spin::default();
        while self.credit_left() == 0 {
            // Keep consuming so that both sides' credits move even when both wait.
            if t0.elapsed() > timeout {
                return Err("no send credit from the peer (it stopped receiving)".into());
            }
            spin.pause();
        }
        Ok(())
    }

    /// Takes one received message if there is one: verifies a data message, re-posts the
    /// receive and returns credit.
    pub fn poll_recv(&mut self) -> Result<Option<Recv>, String> {
        let Some(c) = self.rcq.poll_one() else {
            return Ok(None);
        };
        if c.status != WcStatus::Success {
            return Err(if c.status == WcStatus::FlushErr {
                "the peer closed the connection".into()
            } else {
                status_err(c.opcode, c.status)
            });
        }
        let k = c.wr_id;
        let (mr, off) = if self.lay.test.is_send() {
            (&self.data, (k % self.lay.distinct) * self.lay.stride)
        } else {
            (&self.ctrl, (k % CTRL_RECV_SLOTS) * CTRL_LEN as u64)
        };
        let out = if c.opcode == WcOpcode::RecvImm {
            // An RDMA Write with Immediate Data: its data is placed before the immediate
            // completes; the value is the sender's message number.
            let i = self.data_rx;
            self.data_rx += 1;
            self.check_value(i, ValueKind::Imm, c.imm.unwrap_or(u64::MAX), i);
            Recv::Imm(i)
        } else if !self.lay.test.is_send() || c.solicited {
            let mut b = [0u8; CTRL_LEN];
            let n = (c.byte_len as usize).min(CTRL_LEN);
            mr.read(off as usize, &mut b[..n]).map_err(e2s)?;
            Recv::Ctrl(Ctrl::decode(&b).ok_or("malformed control message from the peer")?)
        } else {
            let i = self.data_rx;
            self.data_rx += 1;
            if self.lay.verify {
                // A Send must carry exactly the message size: a short (or long) one is a
                // failed check of its own, before its octets are compared.
                let len = u64::from(c.byte_len);
                if len != self.msg_size {
                    self.fail(Mismatch {
                        msg: i,
                        size: self.msg_size,
                        what: Differ::Length {
                            got: len,
                            want: self.msg_size,
                        },
                        by_peer: false,
                    });
                } else {
                    let mut got = vec![0u8; len as usize];
                    let mut want = vec![0u8; len as usize];
                    mr.read(off as usize, &mut got).map_err(e2s)?;
                    wire::fill(&mut want, self.peer_salt, i);
                    self.check(i, &got, &want);
                }
            }
            Recv::Data
        };
        if let Recv::Ctrl(Ctrl {
            kind: crate::wire::Kind::Bye,
            ..
        }) = out
        {
            // The peer is closing: nothing more to receive or to credit.
            return Ok(Some(out));
        }
        self.consumed += 1;
        self.post_recv()?;
        if self.lay.credits() {
            self.return_credit()?;
        }
        Ok(Some(out))
    }

    fn return_credit(&mut self) -> Result<(), String> {
        let every = (self.lay.rq / 4).max(1);
        if self.consumed - self.credit_sent < every {
            return Ok(());
        }
        self.credit_sent = self.consumed;
        self.ctrl
            .atomic_u64(CREDIT_SRC_OFF)
            .map_err(e2s)?
            .store(self.consumed.to_le(), std::sync::atomic::Ordering::Release);
        let wr = SendWr::new(
            u64::MAX - 1,
            SendOp::Write {
                remote_stag: self.peer.ctrl_stag,
                remote_to: CREDIT_OFF as u64,
            },
            &[self.ctrl.sge(CREDIT_SRC_OFF as u64, 8)],
        )
        .map_err(e2s)?
        .unsignaled();
        self.post_send(&wr)
    }

    /// Counts a data Send against the peer's credit.
    pub fn note_data_sent(&mut self) {
        self.sent += 1;
    }

    /// How many more Sends the peer has receives posted for.
    pub fn credits_left(&self) -> u64 {
        self.credit_left()
    }

    /// Whether the peer has a receive posted for one more Send.
    pub fn credit_available(&self) -> bool {
        self.credit_left() > 0
    }

    /// The next send completion.
    pub fn poll_send(&self) -> Option<warpcore_verbs::Completion> {
        self.scq.poll_one()
    }

    /// Takes up to `out.len()` send completions at once (as perftest polls its send queue
    /// in batches of 16, `CTX_POLL_BATCH`); how many.
    pub fn poll_sends(&self, out: &mut [warpcore_verbs::Completion]) -> usize {
        self.scq.poll(out)
    }

    /// Takes the send completions of signalled requests a latency loop does not wait for
    /// (inline posts); fails on an error completion.
    pub fn drain_send(&self) -> Result<(), String> {
        while let Some(c) = self.scq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(status_err(c.opcode, c.status));
            }
        }
        Ok(())
    }

    /// Where only unsignalled requests are outstanding, any send completion is an error.
    pub fn poll_send_error(&self) -> Option<String> {
        self.check_send_errors().err()
    }

    /// The run's layout.
    pub fn layout(&self) -> &Layout {
        &self.lay
    }

    /// A new phase of `size`-octet messages: the peer numbers its data messages (the
    /// pattern of a Send, the immediate value of a Write with Immediate Data) from 0 in
    /// every phase, so ours start at 0 again; counted across the run, every message after
    /// the first size failed its check under `--verify -a`.
    pub fn begin_phase(&mut self, size: u64) {
        self.msg_size = size;
        self.data_rx = 0;
    }

    /// Starts counting verification afresh (per phase).
    pub fn reset_counts(&mut self) {
        self.errors = 0;
        self.verified = 0;
    }

    /// Records one failed check (counted as checked).
    fn fail(&mut self, m: Mismatch) {
        self.verified += 1;
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(m);
        }
    }

    /// Records the check of one value of message `i` (an immediate value, an atomic's
    /// original value, the counter word).
    pub fn check_value(&mut self, i: u64, what: ValueKind, got: u64, want: u64) {
        if got != want {
            self.fail(Mismatch {
                msg: i,
                size: self.msg_size,
                what: Differ::Value { what, got, want },
                by_peer: false,
            });
        } else {
            self.verified += 1;
        }
    }

    /// Records the check of message `i`'s octets against the sender's pattern.
    pub fn check(&mut self, i: u64, got: &[u8], want: &[u8]) {
        if got.len() != want.len() {
            self.fail(Mismatch {
                msg: i,
                size: want.len() as u64,
                what: Differ::Length {
                    got: got.len() as u64,
                    want: want.len() as u64,
                },
                by_peer: false,
            });
        } else if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
            self.fail(Mismatch {
                msg: i,
                size: want.len() as u64,
                what: Differ::Octet {
                    at: at as u64,
                    want: want[at],
                    got: got[at],
                },
                by_peer: false,
            });
        } else {
            self.verified += 1;
        }
    }

    /// Waits for the next control message, consuming (and verifying) data on the way.
    pub fn wait_ctrl(&mut self, timeout: Duration) -> Result<Ctrl, String> {
        let t0 = Instant::now();
        let mut spin = Spin::default();
        loop {
            match self.poll_recv()? {
                Some(Recv::Ctrl(c)) => return Ok(c),
                Some(Recv::Data | Recv::Imm(_)) => spin.reset(),
                None => {
                    if t0.elapsed() > timeout {
                        return Err(format!(
                            "the peer did not answer within {} s",
                            timeout.as_secs()
                        ));
                    }
                    spin.pause()
                }
            }
        }
    }
}

fn mpa_of(ev: Option<CmEvent>) -> Result<Established, Option<String>> {
    match ev {
        Some(CmEvent::Established(e)) => Ok(e),
        Some(CmEvent::Rejected { private_data, .. }) => Err(Some(format!(
            "the server rejected the connection: {}",
            String::from_utf8_lossy(&private_data)
        ))),
        Some(CmEvent::Error { error, .. }) => Err(Some(format!("connection failed: {error}"))),
        _ => Err(None),
    }
}

/// Client: connects `qps` QPs to the server, retrying while nobody answers.
#[allow(clippy::too_many_arguments)]
pub fn connect(
    ctx: &Context,
    server: std::net::Ipv4Addr,
    port: u16,
    mpa: &MpaParams,
    lay: Layout,
    qps: u16,
    test_index: u8,
    shape: wire::RunShape,
    timeout: Duration,
) -> Result<Vec<Conn>, String> {
    let pd = ctx.alloc_pd();
    let mut conns = Vec::new();
    let t0 = Instant::now();
    for qi in 0..qps {
        loop {
            let r = regions(&pd, ctx, &lay, None)?;
            let mut flags = 0;
            if lay.verify {
                flags |= wire::FLAG_VERIFY;
            }
            if lay.bidir {
                flags |= wire::FLAG_BIDIR;
            }
            if lay.opts.imm {
                flags |= wire::FLAG_IMM;
            }
            if lay.opts.cmp_swap {
                flags |= wire::FLAG_CMP_SWAP;
            }
            let hello = Hello {
                test: test_index,
                flags,
                qp_index: qi,
                qps,
                tx_depth: lay.tx_depth as u32,
                data_stag: r.data.stag(),
                data_len: lay.data_len,
                ctrl_stag: r.ctrl.stag(),
                inline: lay.opts.inline,
            };
            let mut pd_bytes = hello.encode().to_vec();
            pd_bytes.extend_from_slice(&(lay.max_size as u32).to_be_bytes());
            // -r, after the largest size (absent or 0 from older clients: the default).
            pd_bytes.extend_from_slice(&lay.opts.rx_depth.to_be_bytes());
            // Then the run's shape, for the server to hold its own run flags to.
            pd_bytes.extend_from_slice(&shape.encode());
            let mut c = Conn::new(r, Hello::default(), lay, false);
            for _ in 0..lay.rq {
                c.post_recv()?;
            }
            c.qp.connect(server, port, mpa, &pd_bytes).map_err(e2s)?;
            let left = timeout.saturating_sub(t0.elapsed());
            // Wait for this attempt's outcome as long as the timeout allows: abandoning a
            // slow MPA exchange and retrying could leave the server holding a connection
            // for a QP index twice. A refused connection reports an error at once.
            match mpa_of(ctx.next_event(left)) {
                Ok(est) => {
                    c.peer = Hello::parse(&est.private_data).map_err(|why| {
                        format!(
                            "the server's MPA Reply carries {why}: not an iwperf server of \
                             this client's version (run the same iwperf on both sides)"
                        )
                    })?;
                    c.est = Some(est);
                    conns.push(c);
                    break;
                }
                Err(Some(e)) if e.contains("rejected") => return Err(e),
                Err(_) if t0.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => {
                    return Err(format!(
                        "no iwperf server answered at {server}:{port} within {} s{} (is the \
                         server running on the same link, with the same -p and --no-csum?)",
                        timeout.as_secs(),
                        e.map(|e| format!(" ({e})")).unwrap_or_default()
                    ))
                }
            }
        }
    }
    Ok(conns)
}

/// Server: waits for the client's `qps` connections and accepts them. Returns the layout
/// the client asked for and the test it named.
pub fn accept(
    ctx: &Context,
    port: u16,
    mpa: &MpaParams,
    expect_test: u8,
    expect: &crate::cli::ServerRun,
    timeout: Option<Duration>,
) -> Result<(Vec<Conn>, Layout, Hello), String> {
    ctx.listen(port, mpa)
        .map_err(|e| format!("cannot listen on TCP port {port}: {e} (port busy?)"))?;
    let pd = ctx.alloc_pd();
    let mut conns = Vec::new();
    let mut first: Option<(Layout, Hello)> = None;
    let t0 = Instant::now();
    let mut pending: Vec<Conn> = Vec::new();
    loop {
        if let Some((_, h)) = &first {
            if conns.len() == usize::from(h.qps) {
                break;
            }
        }
        if let Some(t) = timeout {
            if t0.elapsed() > t {
                return Err(format!("no client connected within {} s", t.as_secs()));
            }
        }
        let Some(ev) = ctx.next_event(Duration::from_millis(200)) else {
            continue;
        };
        match ev {
            CmEvent::ConnectRequest(req) => {
                let h = match Hello::parse(&req.private_data) {
                    Ok(h) => h,
                    Err(why) => {
                        // Named to both: a client of another iwperf version is told so (and
                        // this side says whom it refused), not that it is no iwperf at all.
                        let why = format!(
                            "not an iwperf client of this server's version: its MPA Request \
                             carries {why} (run the same iwperf on both sides)"
                        );
                        eprintln!("iwperf: refused the client at {}: {why}", req.remote.0);
                        let _ = ctx.reject(&req, why.as_bytes());
                        continue;
                    }
                };
                let refusal = if h.test != expect_test {
                    Err(format!(
                        "test mismatch: this server runs {}",
                        TestName::ALL[usize::from(expect_test)].name()
                    ))
                } else {
                    expect.check(&crate::cli::ClientRun {
                        qps: h.qps,
                        tx_depth: h.tx_depth,
                        inline: h.inline,
                        flags: h.flags,
                        shape: wire::RunShape::decode(&req.private_data),
                    })
                };
                if let Err(why) = refusal {
                    // The client prints the reason; this side says whom it refused and why.
                    eprintln!("iwperf: refused the client at {}: {why}", req.remote.0);
                    let _ = ctx.reject(&req, why.as_bytes());
                    continue;
                }
                let max_size = req
                    .private_data
                    .get(Hello::LEN..Hello::LEN + 4)
                    .map(|b| u32::from_be_bytes(b.try_into().unwrap_or_default()))
                    .unwrap_or(0) as u64;
                let rx_depth = req
                    .private_data
                    .get(Hello::LEN + 4..Hello::LEN + 8)
                    .map(|b| u32::from_be_bytes(b.try_into().unwrap_or_default()))
                    .unwrap_or(0);
                // What a client's own checks allow (`-s` up to 2^31, `-t` up to 1000, `-q` 1
                // to MAX_QPS, `-r` up to 1020): the server sizes its regions and queues from
                // these, so a hello beyond them is refused rather than allocated (3 x 4 GiB a
                // QP for a hostile one). A QP count of 0 (or an index beyond the count) names
                // no connection of a run: accepted, it ended the wait for the run's QPs at
                // once with none, and the server indexed its first (a panic); a `-r` above
                // what a receive queue holds failed the posting of the receives.
                let refusal = if max_size > 1 << 31 || h.tx_depth == 0 || h.tx_depth > 1000 {
                    Some(format!(
                        "the hello asks for messages of up to {max_size} octets and a TX depth \
                         of {} (at most 2^31 and 1 to 1000)",
                        h.tx_depth
                    ))
                } else if h.qps == 0 || h.qps > crate::net::MAX_QPS || h.qp_index >= h.qps {
                    Some(format!(
                        "the hello names QP {} of {} (a run has 1 to {} QPs, numbered from 0)",
                        h.qp_index,
                        h.qps,
                        crate::net::MAX_QPS
                    ))
                } else if rx_depth > crate::cli::MAX_RX_DEPTH {
                    Some(format!(
                        "the hello asks for -r {rx_depth} (at most {})",
                        crate::cli::MAX_RX_DEPTH
                    ))
                } else {
                    None
                };
                if let Some(why) = refusal {
                    eprintln!("iwperf: refused the client at {}: {why}", req.remote.0);
                    let _ = ctx.reject(&req, why.as_bytes());
                    continue;
                }
                let lay = Layout::new(
                    TestName::ALL[usize::from(h.test)],
                    max_size.max(1),
                    u64::from(h.tx_depth).max(1),
                    h.flags & wire::FLAG_VERIFY != 0,
                    h.flags & wire::FLAG_BIDIR != 0,
                    Opts {
                        imm: h.flags & wire::FLAG_IMM != 0,
                        cmp_swap: h.flags & wire::FLAG_CMP_SWAP != 0,
                        inline: h.inline.min(crate::cli::MAX_INLINE),
                        rx_depth,
                    },
                );
                if first.is_none() {
                    first = Some((lay, h));
                }
                let r = regions(&pd, ctx, &lay, Some(usize::from(req.request.core)))?;
                let mine = Hello {
                    data_stag: r.data.stag(),
                    data_len: lay.data_len,
                    ctrl_stag: r.ctrl.stag(),
                    ..h
                };
                let mut c = Conn::new(r, h, lay, true);
                c.peer_ip = Some(req.remote.0);
                for _ in 0..lay.rq {
                    c.post_recv()?;
                }
                ctx.accept(&req, &c.qp, &mine.encode()).map_err(e2s)?;
                pending.push(c);
            }
            CmEvent::Established(est) => {
                let Some(pos) = pending.iter().position(|c| c.qp.id() == est.qp) else {
                    continue;
                };
                let mut c = pending.remove(pos);
                c.est = Some(est);
                conns.push(c);
            }
            CmEvent::Error { error, .. } => {
                eprintln!("iwperf: a connection attempt failed: {error}");
            }
            _ => {}
        }
    }
    conns.sort_by_key(|c| c.peer.qp_index);
    let (lay, h) = first.expect("at least one connection");
    Ok((conns, lay, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two engines on the in-memory link (server, client), engine threads running them.
    fn hello_pair() -> (crate::net::Endpoint, crate::net::Endpoint) {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "iwperf",
            "write_lat",
            "--loopback=link",
            "--poll-mode",
            "thread",
        ])
        .unwrap();
        match crate::net::open(&cli).unwrap() {
            crate::net::Opened::Pair(s, c) => (s, c),
            crate::net::Opened::Single(_) => unreachable!("--loopback opens a pair"),
        }
    }

    /// A client's MPA Request private data: `h`, the largest size, `-r` and a run shape.
    fn hello_request(h: &Hello, rx_depth: u32) -> Vec<u8> {
        let mut pd = h.encode().to_vec();
        pd.extend_from_slice(&2u32.to_be_bytes());
        pd.extend_from_slice(&rx_depth.to_be_bytes());
        pd.extend_from_slice(
            &wire::RunShape {
                size: 2,
                iters: 10,
                duration_ns: 0,
            }
            .encode(),
        );
        pd
    }

    /// Connects one QP of `ctx` to `server` with `private_data` and returns the outcome.
    ///
    /// The server's `accept` listens from its own thread: a SYN that comes before its
    /// listen is refused with a RST, so a reset is tried again every 100 ms for up to 10 s,
    /// as iwperf's `connect` does until its timeout (on a loaded host the first try lost
    /// that race and the test read the reset as the answer).
    fn try_hello(ctx: &Context, server: std::net::Ipv4Addr, private_data: &[u8]) -> CmEvent {
        let t0 = Instant::now();
        loop {
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(8).unwrap();
            let mut init = QpInit::new(&cq, &cq);
            init.rq_depth = 8;
            let qp = pd.create_qp(&init).unwrap();
            qp.connect(server, 18515, &MpaParams::default(), private_data)
                .unwrap();
            let ev = ctx
                .next_event(Duration::from_secs(20))
                .expect("an answer to the MPA Request");
            let _ = qp.disconnect();
            let refused = matches!(
                ev,
                CmEvent::Error {
                    error: warpcore_verbs::ConnError::TcpReset,
                    ..
                }
            );
            if !refused || t0.elapsed() > Duration::from_secs(10) {
                return ev;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The reason of a rejection, or what came instead.
    fn rejection_of(ev: CmEvent) -> String {
        match ev {
            CmEvent::Rejected { private_data, .. } => {
                String::from_utf8_lossy(&private_data).into_owned()
            }
            other => format!("not rejected: {other:?}"),
        }
    }

    /// A write_lat client's hello: one QP, TX depth 1.
    fn write_lat_hello() -> Hello {
        Hello {
            test: TestName::WriteLat.index(),
            qps: 1,
            tx_depth: 1,
            ..Hello::default()
        }
    }

    /// A write_lat server's `accept` on `s` for up to `secs` seconds: how many connections
    /// it took.
    fn serve_write_lat(s: &crate::net::Endpoint, secs: u64) -> Result<usize, String> {
        accept(
            &s.ctx,
            18515,
            &MpaParams::default(),
            TestName::WriteLat.index(),
            &crate::cli::ServerRun::default(),
            Some(Duration::from_secs(secs)),
        )
        .map(|(conns, _, _)| conns.len())
    }

    /// A hello that names no QP (QP count 0), a QP index beyond its count, or a `-r` above
    /// what a QP's receive queue holds comes from the network: the server refuses it with
    /// the reason. A QP count of 0 was accepted and `accept` returned no connection at all,
    /// which the server then indexed (`conns[0]`): a panic on a peer's private data; a `-r`
    /// of 2000 made posting the receives fail and the server exit.
    #[test]
    fn a_hello_naming_no_qp_or_too_many_receives_is_refused() {
        let (s, c) = hello_pair();
        let hello = write_lat_hello();
        std::thread::scope(|sc| {
            let server = sc.spawn(|| serve_write_lat(&s, 8));
            for (h, rx, want) in [
                (Hello { qps: 0, ..hello }, 0, "QP"),
                (
                    Hello {
                        qp_index: 1,
                        ..hello
                    },
                    0,
                    "QP",
                ),
                (hello, 2000, "-r"),
            ] {
                let why = rejection_of(try_hello(&c.ctx, s.ip, &hello_request(&h, rx)));
                assert!(why.contains(want), "{h:?} -r {rx}: {why}");
            }
            match server.join().unwrap() {
                Err(e) => assert!(e.contains("no client connected"), "{e}"),
                Ok(n) => panic!("the server took a client with {n} connection(s)"),
            }
        });
    }

    /// A hello of another iwperf version is named as such, to the client in the rejection
    /// and to the user of the client when the server's Reply carries one: both used to say
    /// "not an iwperf client / server", which sends the user looking for the wrong peer.
    #[test]
    fn a_hello_of_another_version_is_named() {
        let (s, c) = hello_pair();
        let hello = write_lat_hello();
        let mut pd = hello_request(&hello, 0);
        pd[4] = wire::VERSION + 1;
        std::thread::scope(|sc| {
            let server = sc.spawn(|| serve_write_lat(&s, 5));
            let why = rejection_of(try_hello(&c.ctx, s.ip, &pd));
            let theirs = format!("version {}", wire::VERSION + 1);
            assert!(
                why.contains(&theirs) && why.contains(&format!("{}", wire::VERSION)),
                "{why}"
            );
            assert!(server.join().unwrap().is_err());
        });
        // The other way: a server whose Reply carries another version's hello.
        let (s, c) = hello_pair();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                s.ctx.listen(18515, &MpaParams::default()).unwrap();
                let Some(CmEvent::ConnectRequest(req)) = s.ctx.next_event(Duration::from_secs(20))
                else {
                    panic!("no connection request");
                };
                let pd = s.ctx.alloc_pd();
                let cq = s.ctx.create_cq(8).unwrap();
                let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
                let mut reply = hello.encode();
                reply[4] = wire::VERSION + 1;
                s.ctx.accept(&req, &qp, &reply).unwrap();
                let _ = s.ctx.next_event(Duration::from_secs(5));
                std::thread::sleep(Duration::from_secs(1));
            });
            let lay = Layout::new(TestName::WriteLat, 2, 1, false, false, Opts::default());
            let e = connect(
                &c.ctx,
                s.ip,
                18515,
                &MpaParams::default(),
                lay,
                1,
                TestName::WriteLat.index(),
                wire::RunShape::default(),
                Duration::from_secs(10),
            )
            .map(|v| v.len())
            .unwrap_err();
            let theirs = format!("version {}", wire::VERSION + 1);
            assert!(e.contains(&theirs), "{e}");
        });
    }

    /// A client's Start is checked against the layout its hello gave the server: a size of
    /// 0 (write_lat's server indexed octet `size - 1`) or above the announced largest (the
    /// data region is sized for it) is a typed error, not a phase.
    #[test]
    fn a_start_outside_the_hello_s_sizes_is_refused() {
        let lay = Layout::new(TestName::WriteLat, 4096, 1, false, false, Opts::default());
        assert!(lay.check_start_size(1).is_ok());
        assert!(lay.check_start_size(4096).is_ok());
        for bad in [0, 4097, u64::MAX] {
            let e = lay.check_start_size(bad).unwrap_err();
            assert!(e.contains(&bad.to_string()), "{e}");
        }
    }

    #[test]
    fn mismatch_reports_survive_the_wire_and_name_the_message() {
        let cases = [
            (
                Differ::Octet {
                    at: 7,
                    want: 0x5a,
                    got: 0xa5,
                },
                "message 3 (65536 octets): octet 7 is 0xa5, expected 0x5a",
            ),
            (
                Differ::Length {
                    got: 65535,
                    want: 65536,
                },
                "message 3: received length 65535 octets, expected 65536",
            ),
            (
                Differ::Value {
                    what: ValueKind::Imm,
                    got: 9,
                    want: 3,
                },
                "message 3: immediate data is 9, expected 3",
            ),
        ];
        for (what, text) in cases {
            let m = Mismatch {
                msg: 3,
                size: 65536,
                what,
                by_peer: false,
            };
            assert_eq!(m.to_string(), text);
            let c = Ctrl::decode(&m.to_ctrl().encode()).unwrap();
            let back = Mismatch::from_ctrl(&c).unwrap();
            assert_eq!(back, Mismatch { by_peer: true, ..m });
            assert!(back.to_string().ends_with("(found by the server)"));
        }
        // An unknown code is refused, not guessed.
        let mut c = Ctrl::new(wire::Kind::Mismatch, 1, 1);
        c.duration_ns = 99;
        assert_eq!(Mismatch::from_ctrl(&c), None);
    }
}
