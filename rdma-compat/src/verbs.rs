//! `ibv_*`: the device, its context and `ops`, protection domains, memory regions and
//! windows, completion channels and queues, queue pairs and shared receive queues.
//!
//! Every object handed to C is a `#[repr(C)]` box whose first field is the public struct,
//! so `&box.ibv` and the box have the same address: the pointer the application passes
//! back is cast to the box. A NULL or foreign pointer is the application's bug, as with
//! rdma-core; what we can check (a NULL, a wrong context) returns `EINVAL`.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use warpcore_verbs as wv;
use wv::{Access, Completion, QpInit, SendOp, Sge, WcOpcode, WcStatus};

use crate::sys::*;
use crate::{
    engine, errno_of, guard, set_errno, EAGAIN, EFAULT, EINVAL, EIO, ENODEV, ENOMEM, EOPNOTSUPP,
};

/// Our device (`warpcore0`): one per process, never freed.
struct DevPtr(*mut ibv_device);
// SAFETY: the device struct is written once before the pointer is shared and is read-only
// afterwards.
unsafe impl Send for DevPtr {}
// SAFETY: as above.
unsafe impl Sync for DevPtr {}

static DEVICE: OnceLock<DevPtr> = OnceLock::new();

fn copy_name(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as c_char;
    }
}

fn device() -> *mut ibv_device {
    DEVICE
        .get_or_init(|| {
            let mut d: ibv_device = Default::default();
            d.node_type = IBV_NODE_RNIC;
            d.transport_type = IBV_TRANSPORT_IWARP;
            copy_name(&mut d.name, "warpcore0");
            copy_name(&mut d.dev_name, "uverbs_warpcore0");
            copy_name(&mut d.dev_path, "/dev/null");
            copy_name(&mut d.ibdev_path, "/sys/class/infiniband/warpcore0");
            DevPtr(Box::into_raw(Box::new(d)))
        })
        .0
}

/// The context: a `verbs_context` whose last field is the `ibv_context` handed out.
#[repr(C)]
pub(crate) struct Ctx {
    v: verbs_context,
    /// Its asynchronous events; `async_fd` is their descriptor.
    async_ev: AsyncEvents,
    opens: AtomicUsize,
}

/// A context's asynchronous events (`ibv_get_async_event`) and their descriptor
/// (`async_fd`): a queue, and a socket pair that holds one octet exactly while the queue
/// holds any event (both changed under the queue's lock). So the descriptor is readable
/// while an event waits (`poll()` users), and raising an event never writes more than that
/// one octet: one per event filled the socket after about 280 unread events, and the thread
/// raising the next (the CM dispatcher, which delivers every rdma_cm event too) blocked
/// until the application read one.
pub(crate) struct AsyncEvents {
    q: Mutex<std::collections::VecDeque<ibv_async_event>>,
    tx: std::os::unix::net::UnixStream,
    rx: std::os::unix::net::UnixStream,
}

impl AsyncEvents {
    pub(crate) fn new() -> std::io::Result<AsyncEvents> {
        let (tx, rx) = std::os::unix::net::UnixStream::pair()?;
        // The write end never holds more than one octet; non-blocking all the same, so a
        // raiser can never wait on the application.
        tx.set_nonblocking(true)?;
        Ok(AsyncEvents {
            q: Mutex::default(),
            tx,
            rx,
        })
    }

    /// The descriptor the application polls (`async_fd`).
    pub(crate) fn fd(&self) -> c_int {
        self.rx.as_raw_fd()
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<ibv_async_event>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an event; the descriptor becomes readable if it was not.
    pub(crate) fn post(&self, ev: ibv_async_event) {
        let mut q = self.queue();
        q.push_back(ev);
        if q.len() == 1 {
            let _ = std::io::Write::write(&mut &self.tx, &[1]);
        }
    }

    /// The oldest event, without waiting; the descriptor stops being readable when it was
    /// the last.
    pub(crate) fn take(&self) -> Option<ibv_async_event> {
        let mut q = self.queue();
        let e = q.pop_front()?;
        if q.is_empty() {
            self.unready();
        }
        Some(e)
    }

    /// Takes the queued events `which` selects out of the queue; how many.
    pub(crate) fn purge(&self, which: impl Fn(&ibv_async_event) -> bool) -> usize {
        let mut q = self.queue();
        let before = q.len();
        q.retain(|e| !which(e));
        let n = before - q.len();
        if n > 0 && q.is_empty() {
            self.unready();
        }
        n
    }

    /// Reads the octet back (the caller holds the queue's lock), without waiting whatever
    /// mode the application gave the descriptor.
    fn unready(&self) {
        let mut tok = 0u8;
        // SAFETY: recv(2) into one octet of ours, on our socket.
        unsafe { recv(self.rx.as_raw_fd(), (&raw mut tok).cast(), 1, MSG_DONTWAIT) };
    }
}

struct CtxPtr(*mut Ctx);
// SAFETY: the context is built once before the pointer is shared; afterwards only its
// Mutex- and atomic-protected fields change.
unsafe impl Send for CtxPtr {}
// SAFETY: as above.
unsafe impl Sync for CtxPtr {}

static CONTEXT: OnceLock<Result<CtxPtr, c_int>> = OnceLock::new();

/// The process's context, the engine started (errno on failure).
pub(crate) fn context() -> Result<*mut ibv_context, c_int> {
    let r = CONTEXT.get_or_init(|| {
        if engine().is_err() {
            return Err(ENODEV);
        }
        let async_ev = AsyncEvents::new().map_err(|_| ENOMEM)?;
        let mut v: verbs_context = Default::default();
        v.sz = std::mem::size_of::<verbs_context>();
        v.query_port = Some(query_port_ex);
        v.context.device = device();
        v.context.cmd_fd = -1;
        v.context.async_fd = async_ev.fd();
        v.context.num_comp_vectors = 1;
        // verbs.h's verbs_get_ctx() recognises an extended context by this marker.
        v.context.abi_compat = usize::MAX as *mut c_void;
        let o = &mut v.context.ops;
        o.poll_cq = Some(poll_cq);
        o.req_notify_cq = Some(req_notify_cq);
        o.post_send = Some(post_send);
        o.post_recv = Some(post_recv);
        o.post_srq_recv = Some(post_srq_recv);
        o.alloc_mw = Some(alloc_mw);
        o.bind_mw = Some(bind_mw);
        o.dealloc_mw = Some(dealloc_mw);
        let c = Box::new(Ctx {
            v,
            async_ev,
            opens: AtomicUsize::new(0),
        });
        let p = Box::into_raw(c);
        // SAFETY: p is the box just leaked; `context` is the last field of verbs_context,
        // so the pthread mutex inside is initialised in place (all zeroes is
        // PTHREAD_MUTEX_INITIALIZER on glibc, as Default gave).
        Ok(CtxPtr(p))
    });
    match r {
        // SAFETY: the context lives for the rest of the process.
        Ok(p) => Ok(unsafe { ptr::addr_of_mut!((*p.0).v.context) }),
        Err(e) => Err(*e),
    }
}

fn ctx_box() -> Option<&'static Ctx> {
    match CONTEXT.get() {
        // SAFETY: the context is never freed.
        Some(Ok(p)) => Some(unsafe { &*p.0 }),
        _ => None,
    }
}

/// The live CQs by the engine's id of their queue (what [`wv::CmEvent::CqError`] names),
/// pointers as usize: created by `ibv_create_cq`, removed first by `ibv_destroy_cq`.
fn cqs() -> std::sync::MutexGuard<'static, std::collections::HashMap<u64, usize>> {
    static M: OnceLock<Mutex<std::collections::HashMap<u64, usize>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Queues `IBV_EVENT_CQ_ERR` for the CQ whose engine queue is `id` (it lost a completion),
/// with `element.cq` naming it as ibv_get_async_event(3) describes; nothing if the CQ was
/// destroyed meanwhile. Until the event is acknowledged (`ibv_ack_async_event`) the CQ's
/// destroy waits, as rdma-core's does.
pub(crate) fn push_cq_error(id: u64) {
    let map = cqs();
    let Some(&p) = map.get(&id) else { return };
    // SAFETY: a registered CQ is live (ibv_destroy_cq unregisters it under this lock first).
    let c = unsafe { &*(p as *mut Cq) };
    c.events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .async_unacked += 1;
    let mut ev = ibv_async_event {
        event_type: IBV_EVENT_CQ_ERR,
        ..Default::default()
    };
    ev.element.cq = p as *mut ibv_cq;
    push_async(ev);
    drop(map);
}

/// Takes the queued, not yet delivered asynchronous events of a CQ, SRQ or QP being
/// destroyed off the queue; how many. (A reader woken by the descriptor that then finds the queue
/// empty waits for the next event, or fails with `EAGAIN` on a non-blocking descriptor.)
fn purge_async(kind: ibv_event_type, object: *mut c_void) -> u64 {
    let Some(c) = ctx_box() else { return 0 };
    let n = c.async_ev.purge(|e| {
        e.event_type == kind
            // SAFETY: reading the union member of the event's kind (a CQ, an SRQ or a
            // QP pointer, all pointers in the same place).
            && unsafe { e.element.cq }.cast::<c_void>() == object
    });
    n as u64
}

const MSG_DONTWAIT: c_int = 0x40;

/// Queues an asynchronous event (`ibv_get_async_event`); its descriptor is readable until
/// the last queued is taken. Never waits for the application.
pub(crate) fn push_async(ev: ibv_async_event) {
    if let Some(c) = ctx_box() {
        c.async_ev.post(ev);
    }
}

fn check_ctx(c: *mut ibv_context) -> bool {
    !c.is_null() && context().is_ok_and(|ours| ours == c)
}

// ---------------------------------------------------------------- device and context

#[no_mangle]
pub extern "C" fn __wc_ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard(null_mut(), || {
        // A device is listed when the environment names a port; the engine starts at
        // ibv_open_device (or ibv_get_device_guid). A configuration error is printed (the caller sees no device).
        // (The drop-in's own variables too: a device listed would not open.)
        let config = warpcore_apps::env::from_env()
            .map_err(|e| e.to_string())
            .and_then(|_| crate::own_vars(|k| std::env::var_os(k)));
        let n = match config {
            Ok(_) => 1,
            Err(e) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| eprintln!("warpcore: no device: {e}"));
                0
            }
        };
        if !num.is_null() {
            // SAFETY: the caller passes NULL or a valid int (ibv_get_device_list(3)).
            unsafe { *num = n };
        }
        let list: Box<[*mut ibv_device; 2]> =
            Box::new([if n == 1 { device() } else { null_mut() }, null_mut()]);
        Box::into_raw(list).cast()
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        if !list.is_null() {
            // SAFETY: lists come from ibv_get_device_list, a leaked Box<[_; 2]>.
            drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard(ptr::null(), || {
        if dev.is_null() {
            return ptr::null();
        }
        // SAFETY: dev is our device (the only one listed).
        unsafe { (*dev).name.as_ptr() }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard(0, || {
        if dev.is_null() || dev != device() {
            return 0;
        }
        // rdma-core reads the node GUID (sysfs node_guid) without opening the device, and
        // it is the one ibv_query_device reports. Ours is the EUI-64 of the port's MAC,
        // which a DPDK port has once it is probed: the engine starts here, as at
        // ibv_open_device (before, this answered 0 until the device was opened, so
        // ibv_devices listed warpcore0 with GUID 0000000000000000). 0 if it cannot start,
        // as rdma-core answers when it cannot read the GUID.
        match engine() {
            Ok(e) => e.ctx.query_device().node_guid.to_be(),
            Err(_) => 0,
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_device_index(_dev: *mut ibv_device) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn __wc_ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard(null_mut(), || {
        if dev != device() {
            set_errno(ENODEV);
            return null_mut();
        }
        match context() {
            Ok(c) => {
                if let Some(b) = ctx_box() {
                    b.opens.fetch_add(1, Ordering::Relaxed);
                }
                c
            }
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_close_device(c: *mut ibv_context) -> c_int {
    guard(EIO, || {
        // The engine and its EAL live until the process exits: DPDK cannot initialise twice.
        if !check_ctx(c) {
            return EINVAL;
        }
        if let Some(b) = ctx_box() {
            let _ = b
                .opens
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_query_device(c: *mut ibv_context, out: *mut ibv_device_attr) -> c_int {
    guard(EIO, || {
        if !check_ctx(c) || out.is_null() {
            return EINVAL;
        }
        let Ok(e) = engine() else { return ENODEV };
        let a = e.ctx.query_device();
        let mut d: ibv_device_attr = Default::default();
        copy_name(
            &mut d.fw_ver,
            concat!("warpcore ", env!("CARGO_PKG_VERSION")),
        );
        d.node_guid = a.node_guid.to_be();
        d.sys_image_guid = d.node_guid;
        d.max_mr_size = MAX_MR_SIZE as u64;
        d.page_size_cap = 4096;
        d.vendor_id = 0;
        d.max_qp = clamp(a.max_qp);
        d.max_qp_wr = clamp(a.max_qp_wr);
        // Type 2 windows are bound to a QP whose PD is theirs (`ibv_bind_mw` through
        // IBV_WR_BIND_MW refuses another PD): IB's type 2B, named so applications that look
        // for it before allocating one find it (contract query_limits).
        d.device_cap_flags =
            IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS;
        d.max_sge = clamp(a.max_sge);
        d.max_sge_rd = MAX_SGE_RD as c_int;
        d.max_cq = clamp(CQS.max());
        d.max_cqe = clamp(a.max_cqe);
        d.max_mr = clamp(a.max_mr);
        d.max_pd = clamp(PDS.max());
        d.max_qp_rd_atom = c_int::from(a.max_qp_rd_atom);
        d.max_res_rd_atom = c_int::from(a.max_qp_rd_atom) * d.max_qp;
        d.max_qp_init_rd_atom = c_int::from(a.max_qp_init_rd_atom);
        // Atomics are RFC 7306's: with WARPCORE_RFC7306=off every one posted is refused
        // (EOPNOTSUPP), so the device has none to offer, as siw reports (atomic_cap 0) and
        // as applications test before they post one (ibv_query_device(3)).
        d.atomic_cap = if e.rfc7306 {
            IBV_ATOMIC_HCA
        } else {
            IBV_ATOMIC_NONE
        };
        d.max_mw = clamp(a.max_mr);
        d.max_srq = clamp(SRQS.max());
        d.max_srq_wr = d.max_qp_wr;
        d.max_srq_sge = d.max_sge;
        d.max_pkeys = 1;
        d.phys_port_cnt = a.phys_port_cnt;
        // SAFETY: out points to a caller-owned ibv_device_attr (ibv_query_device(3)).
        unsafe { out.write(d) };
        0
    })
}

fn clamp(v: usize) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// A port MTU in octets (one of 256 to 4096, `PortAttr::active_mtu`) as its `ibv_mtu`.
fn ib_mtu(octets: u32) -> ibv_mtu {
    match octets {
        4096 => IBV_MTU_4096,
        2048 => IBV_MTU_2048,
        1024 => IBV_MTU_1024,
        512 => IBV_MTU_512,
        _ => IBV_MTU_256,
    }
}

fn fill_port(out: *mut ibv_port_attr, size: usize) -> c_int {
    let Ok(e) = engine() else { return ENODEV };
    let Ok(p) = e.ctx.query_port(1) else {
        return EINVAL;
    };
    let mtu = ib_mtu(p.active_mtu);
    let mut a: ibv_port_attr = Default::default();
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = mtu;
    a.active_mtu = mtu;
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.max_msg_sz = u32::MAX;
    a.pkey_tbl_len = 1;
    a.active_width = 1;
    a.active_speed = 32;
    a.phys_state = 5; // LinkUp
    a.link_layer = IBV_LINK_LAYER_ETHERNET as u8;
    // SAFETY: out is valid for `size` octets (the caller's struct, maybe an older, shorter
    // one); we copy no more than both sizes.
    unsafe {
        ptr::copy_nonoverlapping(
            ptr::addr_of!(a).cast::<u8>(),
            out.cast::<u8>(),
            size.min(std::mem::size_of::<ibv_port_attr>()),
        )
    };
    0
}

unsafe extern "C" fn query_port_ex(
    c: *mut ibv_context,
    port: u8,
    out: *mut ibv_port_attr,
    size: usize,
) -> c_int {
    guard(EIO, || {
        if !check_ctx(c) || out.is_null() || port != 1 {
            return EINVAL;
        }
        fill_port(out, size)
    })
}

/// The exported `ibv_query_port` gets the compat (shorter) struct: verbs.h calls it only
/// when the context has no `query_port` entry, which ours has.
#[no_mangle]
pub extern "C" fn __wc_ibv_query_port(c: *mut ibv_context, port: u8, out: *mut c_void) -> c_int {
    guard(EIO, || {
        if !check_ctx(c) || out.is_null() || port != 1 {
            return EINVAL;
        }
        // The compat struct is ibv_port_attr up to and including link_layer.
        fill_port(
            out.cast(),
            std::mem::offset_of!(ibv_port_attr, link_layer) + 1,
        )
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        if !check_ctx(c) || gid.is_null() || port != 1 || index != 0 {
            set_errno(EINVAL);
            return -1;
        }
        let Ok(e) = engine() else {
            set_errno(ENODEV);
            return -1;
        };
        let Ok(p) = e.ctx.query_port(1) else {
            set_errno(EINVAL);
            return -1;
        };
        // The GID an iWARP provider reports: the port's MAC address in the first six
        // octets, zeroes after it (siw_query_gid, drivers/infiniband/sw/siw/siw_verbs.c:
        // "subnet_prefix == interface_id == 0"; cxgb4, i40iw and irdma likewise), which
        // libibverbs hands on from the kernel's GID table. It was the IPv4-mapped address,
        // which no iWARP provider reports.
        let mut raw = [0u8; 16];
        raw[..6].copy_from_slice(&p.mac);
        // SAFETY: gid is a caller-owned 16-octet ibv_gid.
        unsafe { (*gid).raw = raw };
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc__ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
    size: usize,
) -> c_int {
    guard(EIO, || {
        // The entry is `size` octets: rdma-core passes it to the kernel as the out
        // attribute's length (cmd_device.c, __ibv_query_gid_ex), and uverbs refuses one
        // shorter than its struct with EINVAL. Before, a whole entry was written past it.
        if entry.is_null() || size < std::mem::size_of::<ibv_gid_entry>() {
            return EINVAL;
        }
        let mut g: ibv_gid = Default::default();
        if port > 255 || index > 0 || __wc_ibv_query_gid(c, port as u8, 0, &mut g) != 0 {
            return EINVAL;
        }
        let mut en: ibv_gid_entry = Default::default();
        en.gid = g;
        en.gid_index = 0;
        en.port_num = port;
        // The type the kernel's GID cache gives an iWARP port's entries (cache.c,
        // config_non_roce_gid_cache leaves IB_GID_TYPE_IB), which siw's users read: the
        // GID is the MAC (above), not an IP-based RoCE v2 one as was reported.
        en.gid_type = IBV_GID_TYPE_IB;
        en.ndev_ifindex = 0;
        // SAFETY: entry is a caller-owned ibv_gid_entry.
        unsafe { entry.write(en) };
        0
    })
}

/// `ibv_query_gid_type` (rdma-core's private ABI, which `ibv_devinfo` uses): the type the
/// kernel's sysfs shows for an iWARP port's GID (siw's: `IB/RoCE v1`, the GID cache's
/// IB_GID_TYPE_IB), as `_ibv_query_gid_ex` reports it.
#[no_mangle]
pub extern "C" fn __wc_ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    guard(-1, || {
        // enum ibv_gid_type_sysfs (rdma-core's private driver.h): IB/RoCE v1 = 0, RoCE v2 = 1.
        const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_uint = 0;
        if !check_ctx(c) || ty.is_null() || port != 1 || index != 0 {
            set_errno(EINVAL);
            return -1;
        }
        // SAFETY: ty is the caller's.
        unsafe { *ty = IBV_GID_TYPE_SYSFS_IB_ROCE_V1 };
        0
    })
}

/// `ibv_read_sysfs_file`: Warpcore's device has no sysfs directory.
#[no_mangle]
pub extern "C" fn __wc_ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(crate::ENOENT);
    -1
}

#[no_mangle]
pub extern "C" fn __wc_ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // ibv_query_pkey(3): 0 on success, -1 on error (errno set), unlike ibv_query_port's
    // errno value.
    guard(-1, || {
        if !check_ctx(c) || pkey.is_null() || port != 1 || index != 0 {
            set_errno(EINVAL);
            return -1;
        }
        // SAFETY: pkey is a caller-owned u16.
        unsafe { *pkey = 0xFFFF_u16.to_be() };
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_pkey_index(_c: *mut ibv_context, _port: u8, pkey: u16) -> c_int {
    if pkey == 0xFFFF_u16.to_be() {
        0
    } else {
        -1
    }
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_async_event(c: *mut ibv_context, ev: *mut ibv_async_event) -> c_int {
    guard(-1, || {
        let Some(b) = ctx_box() else {
            set_errno(EINVAL);
            return -1;
        };
        if !check_ctx(c) || ev.is_null() {
            set_errno(EINVAL);
            return -1;
        }
        loop {
            if let Some(e) = b.async_ev.take() {
                // SAFETY: ev is a caller-owned ibv_async_event.
                unsafe { ev.write(e) };
                return 0;
            }
            // Block as the real library does (a read on async_fd), unless the caller made
            // the descriptor non-blocking.
            let fd = b.async_ev.fd();
            if nonblocking(fd) {
                set_errno(EAGAIN);
                return -1;
            }
            wait_readable(fd, None);
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_ack_async_event(ev: *mut ibv_async_event) {
    guard((), || {
        // SAFETY: ev is NULL or an event ibv_get_async_event gave the caller.
        let Some(e) = (unsafe { ev.as_ref() }) else {
            return;
        };
        if e.event_type == IBV_EVENT_CQ_ERR {
            // SAFETY: the CQ of an unacknowledged event is live (its destroy waits for
            // this acknowledgement).
            if let Some(c) = unsafe { cq_ref(e.element.cq) } {
                let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
                ev.async_unacked = ev.async_unacked.saturating_sub(1);
                c.all_acked.notify_all();
            }
        }
        if e.event_type == IBV_EVENT_QP_LAST_WQE_REACHED {
            // SAFETY: the QP of an unacknowledged event is live (as above).
            if let Some(q) = unsafe { qp_ref(e.element.qp) } {
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                lw.unacked = lw.unacked.saturating_sub(1);
                q.all_acked.notify_all();
            }
        }
        if e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED {
            // SAFETY: the SRQ of an unacknowledged event is live (as above).
            if let Some(s) = unsafe { e.element.srq.cast::<Srq>().as_ref() } {
                let mut n = s.async_unacked.lock().unwrap_or_else(|e| e.into_inner());
                *n = n.saturating_sub(1);
                s.all_acked.notify_all();
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_fork_init() -> c_int {
    // Registered memory is never pinned or remapped by Warpcore: fork is always safe.
    0
}

#[no_mangle]
pub extern "C" fn __wc_ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED as c_int
}

/// Sets the calling thread's timer slack to 1 ns (`PR_SET_TIMERSLACK`), so its short
/// sleeps last what they ask.
pub(crate) fn fine_timer_slack() {
    const PR_SET_TIMERSLACK: c_int = 29;
    // SAFETY: prctl with an integer argument changes only this thread's timer slack.
    unsafe { prctl(PR_SET_TIMERSLACK, 1) };
}

extern "C" {
    fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    fn prctl(option: c_int, ...) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn poll(fds: *mut PollFd, n: u64, timeout: c_int) -> c_int;
}

#[repr(C)]
pub(crate) struct PollFd {
    pub fd: c_int,
    pub events: i16,
    pub revents: i16,
}

pub(crate) fn nonblocking(fd: c_int) -> bool {
    const F_GETFL: c_int = 3;
    const O_NONBLOCK: c_int = 0o4000;
    // SAFETY: F_GETFL on a descriptor we own reads its flags.
    let fl = unsafe { fcntl(fd, F_GETFL) };
    fl >= 0 && fl & O_NONBLOCK != 0
}

/// Waits until `fd` is readable (or `timeout` passes).
pub(crate) fn wait_readable(fd: c_int, timeout: Option<Duration>) {
    let mut p = PollFd {
        fd,
        events: 1, // POLLIN
        revents: 0,
    };
    let t = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as c_int);
    // SAFETY: one valid pollfd.
    unsafe { poll(&mut p, 1, t) };
}

/// `rpoll` of librdmacm: Warpcore has no rsockets, so every descriptor is a plain one.
#[no_mangle]
pub extern "C" fn __wc_rpoll(fds: *mut c_void, nfds: u64, timeout: c_int) -> c_int {
    // SAFETY: the caller's pollfd array, as poll(2) takes it.
    guard(-1, || unsafe { poll(fds.cast(), nfds, timeout) })
}

/// Destroys one of our objects: `p`, the public struct, is the first field of a box of `T`
/// made by the matching create. `EINVAL` for NULL, as rdma-core's destroys answer.
///
/// # Safety
/// `p` is NULL or such a box, which the caller no longer uses.
pub(crate) unsafe fn destroy<P, T>(p: *mut P) -> c_int {
    guard(EIO, || {
        if p.is_null() {
            return EINVAL;
        }
        // SAFETY: per the contract.
        drop(unsafe { Box::from_raw(p.cast::<T>()) });
        0
    })
}

/// How many objects use this one: the QPs of a CQ or an SRQ; the MRs, MWs, SRQs and QPs
/// of a PD. Its destroy fails with `EBUSY` while any does (ibv_create_cq(3): "fails if any
/// queue pair is still associated with this CQ"; ibv_alloc_pd(3), ibv_create_srq(3)), so
/// that no user is left pointing at freed memory.
#[derive(Debug, Default)]
pub(crate) struct Uses(AtomicUsize);

impl Uses {
    fn add(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    fn remove(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    fn busy(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

/// A user of `p`'s PD (an MR, MW, SRQ or QP) comes or goes.
fn pd_uses(p: *mut ibv_pd) -> Option<&'static Uses> {
    // SAFETY: p is NULL or a live PD of ours: a PD is not freed while it has users.
    unsafe { pd_ref(p) }.map(|p| &p.uses)
}

/// `ibv_query_device`'s `max_pd`: the most protection domains the process holds at once
/// (`ibv_alloc_pd` refuses one more).
pub(crate) const MAX_PD: usize = 65536;
/// `ibv_query_device`'s `max_cq`: the most completion queues at once (`ibv_create_cq`).
pub(crate) const MAX_CQ: usize = 65536;
/// `ibv_query_device`'s `max_srq`: the most shared receive queues at once
/// (`ibv_create_srq`).
pub(crate) const MAX_SRQ: usize = 65536;

/// How many objects of one kind are live, against the limit `ibv_query_device` advertises
/// for them: ibv_query_device(3) calls its maxima "the upper limits of supported
/// resources", so the create past the limit fails with `ENOMEM` and the destroy gives the
/// place back, as siw counts its PDs, CQs and SRQs (siw_alloc_pd, siw_create_cq,
/// siw_create_srq: `atomic_inc_return(..) > SIW_MAX_*` is `-ENOMEM`). The engine has no
/// table of these objects to fill, so without the count nothing held them to the number.
#[derive(Debug)]
pub(crate) struct Live {
    n: AtomicUsize,
    max: usize,
}

impl Live {
    pub(crate) const fn new(max: usize) -> Self {
        Self {
            n: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes a place, or `ENOMEM` when all `max` are taken.
    pub(crate) fn take(&self) -> Result<(), c_int> {
        self.n
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| ENOMEM)
    }

    /// The limit.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Gives back a place [`Live::take`] took (the object is gone).
    pub(crate) fn give_back(&self) {
        let _ = self
            .n
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// The live PDs, CQs and SRQs of the process.
pub(crate) static PDS: Live = Live::new(MAX_PD);
pub(crate) static CQS: Live = Live::new(MAX_CQ);
pub(crate) static SRQS: Live = Live::new(MAX_SRQ);

// ---------------------------------------------------------------- protection domains

#[repr(C)]
pub(crate) struct Pd {
    pub ibv: ibv_pd,
    pub pd: wv::ProtectionDomain,
    uses: Uses,
}

/// # Safety
/// `p` is NULL or a PD from [`__wc_ibv_alloc_pd`].
pub(crate) unsafe fn pd_ref<'a>(p: *mut ibv_pd) -> Option<&'a Pd> {
    // SAFETY: per the contract, a non-null p is the first field of a live Pd box.
    unsafe { p.cast::<Pd>().as_ref() }
}

#[no_mangle]
pub extern "C" fn __wc_ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    guard(null_mut(), || {
        if !check_ctx(c) {
            set_errno(EINVAL);
            return null_mut();
        }
        let Ok(e) = engine() else {
            set_errno(ENODEV);
            return null_mut();
        };
        // max_pd domains live: ENOMEM, as siw_alloc_pd answers past SIW_MAX_PD.
        if let Err(err) = PDS.take() {
            set_errno(err);
            return null_mut();
        }
        // Every number the engine has for a domain given out: ENOMEM, as the kernel's
        // object table answers when it is full.
        let pd = match e.ctx.try_alloc_pd() {
            Ok(pd) => pd,
            Err(err) => {
                PDS.give_back();
                set_errno(errno_of(&err));
                return null_mut();
            }
        };
        let b = Box::new(Pd {
            ibv: ibv_pd {
                context: c,
                handle: 0,
            },
            pd,
            uses: Uses::default(),
        });
        Box::into_raw(b).cast()
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    guard(EIO, || {
        // ibv_alloc_pd(3): deallocating fails while MRs, MWs, SRQs or QPs use the PD.
        if pd_uses(p).is_some_and(Uses::busy) {
            return crate::EBUSY;
        }
        // SAFETY: p is NULL or ours (the matching create), no longer used by the caller.
        let r = unsafe { destroy::<_, Pd>(p) };
        if r == 0 {
            PDS.give_back();
        }
        r
    })
}

// ---------------------------------------------------------------- memory regions

#[repr(C)]
pub(crate) struct Mr {
    ibv: ibv_mr,
    /// Taken out while `ibv_dereg_mr` tries to deregister it, and put back if refused.
    mr: Mutex<Option<wv::MemoryRegion>>,
}

/// `IBV_ACCESS_OPTIONAL_RANGE` (ib_user_ioctl_verbs.h: bits `IB_UVERBS_ACCESS_OPTIONAL_FIRST`,
/// 1 << 20, to `IB_UVERBS_ACCESS_OPTIONAL_LAST`, 1 << 29), a macro bindgen does not carry.
const ACCESS_OPTIONAL_RANGE: c_uint =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

pub(crate) fn access_of(flags: c_int) -> Result<Access, c_int> {
    // The optional access flags (IBV_ACCESS_RELAXED_ORDERING and those after it) are hints
    // a provider may ignore: rdma-core's ibv_reg_mr_iova2 strips them for a kernel without
    // IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS and the kernel's ib_check_mr_access lets
    // them through, so a program passing one (UCX, newer perftest) registers everywhere.
    // IBV_ACCESS_HUGETLB is a hint as well ("huge pages are guaranteed to be used for this
    // MR, applicable with IBV_ACCESS_ON_DEMAND in explicit mode only", ibv_reg_mr(3)): the
    // kernel's ib_check_mr_access accepts it (IB_ACCESS_SUPPORTED) and siw ignores it, so
    // a program passing it for its huge-page buffers registers them there.
    let f = flags as c_uint & !(ACCESS_OPTIONAL_RANGE | IBV_ACCESS_HUGETLB);
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND;
    // In the order of the kernel's ib_check_mr_access (include/rdma/ib_verbs.h), which
    // rdma-core's ibv_reg_mr passes the flags to: remote write or atomic access without
    // local write is EINVAL (ibv_reg_mr(3)); so is a bit that is none of rdma-core 44's
    // IBV_ACCESS_* flags (outside IB_ACCESS_SUPPORTED; it was EOPNOTSUPP here).
    if f & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && f & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(EINVAL);
    }
    if f & !(known | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND) != 0 {
        return Err(EINVAL);
    }
    if f & !known != 0 {
        // Zero-based and on-demand paging: flags of the API this device does not support
        // (the kernel answers ODP without the capability with EOPNOTSUPP).
        return Err(EOPNOTSUPP);
    }
    let mut a = Access::empty();
    for (bit, acc) in [
        (IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
        (IBV_ACCESS_MW_BIND, Access::MW_BIND),
    ] {
        if f & bit != 0 {
            a |= acc;
        }
    }
    Ok(a)
}

/// `ibv_query_device`'s `max_mr_size`, and the longest region `ibv_reg_mr` registers: the
/// most one [`wv::Region`] holds (Rust's bound on one object, `isize::MAX`). The Tagged
/// Offsets of the region must fit below 2^64 as well (`iova` plus the length), which the
/// registration checks (`EINVAL`).
pub(crate) const MAX_MR_SIZE: usize = isize::MAX as usize;

/// Whether `[addr, addr + len)` is mapped in this process, readable and (`write`) writable,
/// as `ib_umem_get` finds when it pins a registration's pages: `EINVAL` for a range that
/// wraps, `EFAULT` for one with a page unmapped, or without the permission asked for, per
/// `/proc/self/maps` (read at each registration, not on the data path). Where that file
/// cannot be read, the range is taken as the application gives it, as before.
/// Later changes (an `munmap` or `mprotect` after the registration) are not seen: nothing
/// pins the pages, as the kernel does for a hardware RNIC (`docs/rdma-compat.md`).
pub(crate) fn mapped_for(addr: usize, len: usize, write: bool) -> Result<(), c_int> {
    let Some(end) = addr.checked_add(len) else {
        return Err(EINVAL);
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Ok(());
    };
    covered(&maps, addr, end, write)
}

/// [`mapped_for`] on the text of a `/proc/<pid>/maps`: whether its mappings, in the
/// ascending order the kernel lists them, cover `[addr, end)` without a gap, each readable
/// and, if `write`, writable.
pub(crate) fn covered(maps: &str, addr: usize, end: usize, write: bool) -> Result<(), c_int> {
    let mut at = addr;
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= at {
            continue;
        }
        let p = perms.as_bytes();
        let allowed = p.first() == Some(&b'r') && (!write || p.get(1) == Some(&b'w'));
        if lo > at || !allowed {
            return Err(EFAULT);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
    Err(EFAULT)
}

fn reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, flags: c_int) -> *mut ibv_mr {
    guard(null_mut(), || {
        // SAFETY: pd is NULL or a PD of ours (ibv_reg_mr(3)).
        let Some(p) = (unsafe { pd_ref(pd) }) else {
            set_errno(EINVAL);
            return null_mut();
        };
        // In the kernel's order: the access flags (ib_uverbs_reg_mr's ib_check_mr_access),
        // then siw_reg_user_mr's length checks, then ib_umem_get's of the pages below.
        let access = match access_of(flags) {
            Ok(a) => a,
            Err(e) => {
                set_errno(e);
                return null_mut();
            }
        };
        if len == 0 {
            set_errno(EINVAL);
            return null_mut();
        }
        if len > MAX_MR_SIZE {
            // ENOMEM, as siw_reg_user_mr answers a length above what the process may pin
            // (RLIMIT_MEMLOCK) and ib_umem_get one it cannot: before, Region::from_raw's
            // assertion panicked, and the caller read EIO.
            set_errno(ENOMEM);
            return null_mut();
        }
        // A NULL address is EFAULT, what ib_umem_get finds when it pins page 0, which no
        // process maps (vm.mmap_min_addr); it was EINVAL.
        if addr.is_null() {
            set_errno(EFAULT);
            return null_mut();
        }
        // What the kernel's ib_umem_get checks when it pins the pages: the range does not
        // wrap (EINVAL), and every page of it is mapped, readable, and writable if the
        // region may be written (EFAULT). Registered, memory that is not there or is
        // read-only was written by the first placement into it: a SIGSEGV of the engine,
        // which a peer's Write or Send could set off.
        if let Err(e) = mapped_for(
            addr as usize,
            len,
            flags as c_uint & IBV_ACCESS_LOCAL_WRITE != 0,
        ) {
            set_errno(e);
            return null_mut();
        }
        // SAFETY: ibv_reg_mr's contract is Region::from_raw's: the application keeps the
        // memory mapped and reserved for the region until ibv_dereg_mr, and touches it only
        // through raw accesses (C code holds no Rust references).
        let region = Arc::new(unsafe { wv::Region::from_raw(addr.cast(), len) });
        match p.pd.register_with_base(region, access, iova) {
            Ok(mr) => {
                let stag = mr.stag();
                p.uses.add();
                let b = Box::new(Mr {
                    ibv: ibv_mr {
                        context: p.ibv.context,
                        pd,
                        addr,
                        length: len,
                        handle: stag,
                        lkey: stag,
                        rkey: stag,
                    },
                    mr: Mutex::new(Some(mr)),
                });
                Box::into_raw(b).cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr(pd, addr, len, addr as u64, access)
}

#[no_mangle]
pub extern "C" fn __wc_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr(pd, addr, len, iova, access)
}

#[no_mangle]
pub extern "C" fn __wc_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg_mr(pd, addr, len, iova, access as c_int)
}

#[no_mangle]
pub extern "C" fn __wc_ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(EIO, || {
        // SAFETY: mr is NULL or ours (the matching create).
        let Some(m) = (unsafe { mr.cast::<Mr>().as_ref() }) else {
            return EINVAL;
        };
        let pd = m.ibv.pd;
        {
            let mut slot = m.mr.lock().unwrap_or_else(|e| e.into_inner());
            let Some(region) = slot.take() else {
                return EINVAL;
            };
            // The registration must have ended when this returns 0: the application may
            // free the memory then. While windows are bound to the region the engine
            // refuses, and so do we (ibv_dereg_mr(3) returns the errno; rdma-core's
            // kernel path answers EBUSY), keeping the region as it was.
            if let Err((region, e)) = region.deregister() {
                *slot = Some(region);
                return errno_of(&e);
            }
        }
        // SAFETY: mr is ours, deregistered, and no longer used by the caller.
        let r = unsafe { destroy::<_, Mr>(mr) };
        if r == 0 {
            if let Some(u) = pd_uses(pd) {
                u.remove();
            }
        }
        r
    })
}

// ---------------------------------------------------------------- memory windows

#[repr(C)]
pub(crate) struct Mw {
    /// The application's `struct ibv_mw`. In a cell: `ibv_bind_mw` and `IBV_WR_BIND_MW`
    /// store the new `rkey` while other threads hold the `&Mw` of their own calls (C
    /// callers bind one window from two threads at once), so no reference we make may
    /// assert that its bytes do not change. Our only write to it is [`Mw::set_rkey`].
    ibv: UnsafeCell<ibv_mw>,
    mw: wv::MemoryWindow,
    /// Held across a bind's post and its store of `rkey`, so that of racing binds (the
    /// answer is the provider's, ibv_bind_mw(3)) the `rkey` left is the last posted one's,
    /// the key the next `ibv_inc_rkey` must advance from.
    bind: Mutex<()>,
}

impl Mw {
    /// Stores `rkey` in the application's `mw->rkey`: an atomic store through the cell's
    /// raw pointer, no reference to the struct (two plain stores from two threads were a
    /// data race; a `&mut` to it, as was made here, aliased the other thread's).
    fn set_rkey(&self, rkey: u32) {
        // SAFETY: the cell's pointer is valid for as long as `self` is; `rkey` is a
        // `uint32_t` aligned as one, and every write this library makes to it is this
        // atomic store (made under `self.bind`).
        let field = unsafe { AtomicU32::from_ptr(&raw mut (*self.ibv.get()).rkey) };
        field.store(rkey, Ordering::Release);
    }

    /// The application's `mw->rkey`, read as [`Mw::set_rkey`] stores it.
    fn rkey(&self) -> u32 {
        // SAFETY: as in `set_rkey`.
        let field = unsafe { AtomicU32::from_ptr(&raw mut (*self.ibv.get()).rkey) };
        field.load(Ordering::Acquire)
    }
}

unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, ty: ibv_mw_type) -> *mut ibv_mw {
    guard(null_mut(), || {
        // SAFETY: pd is NULL or ours (ibv_alloc_mw(3)).
        let Some(p) = (unsafe { pd_ref(pd) }) else {
            set_errno(EINVAL);
            return null_mut();
        };
        let t = match ty {
            IBV_MW_TYPE_1 => wv::MwType::Type1,
            IBV_MW_TYPE_2 => wv::MwType::Type2,
            _ => {
                set_errno(EINVAL);
                return null_mut();
            }
        };
        match p.pd.alloc_mw(t) {
            Ok(mw) => Box::into_raw(Box::new(Mw {
                ibv: UnsafeCell::new(ibv_mw {
                    context: p.ibv.context,
                    pd,
                    rkey: mw.stag(),
                    handle: mw.stag(),
                    type_: ty,
                }),
                mw: {
                    p.uses.add();
                    mw
                },
                bind: Mutex::new(()),
            }))
            .cast(),
            Err(e) => {
                set_errno(errno_of(&e));
                null_mut()
            }
        }
    })
}

unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard(EIO, || {
        // SAFETY: mw is NULL or ours (the matching create).
        let pd = unsafe { mw.cast::<Mw>().as_ref() }.map_or(null_mut(), |m| {
            // SAFETY: the cell's pointer is valid while `m` is; `pd` read through it, no
            // reference to the struct (see `Mw::ibv`).
            unsafe { (*m.ibv.get()).pd }
        });
        // SAFETY: mw is NULL or ours (the matching create), no longer used by the caller.
        let r = unsafe { destroy::<_, Mw>(mw) };
        if r == 0 {
            if let Some(u) = pd_uses(pd) {
                u.remove();
            }
        }
        r
    })
}

/// The window rights of `mw_access_flags`.
fn window_access(flags: c_uint) -> Access {
    let mut a = Access::empty();
    for (bit, acc) in [
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
    ] {
        if flags & bit != 0 {
            a |= acc;
        }
    }
    a
}

/// Posts the bind of `mw` to `info` on `q`; the window's rkey becomes the new STag, under
/// `key` (`IBV_WR_BIND_MW`'s, the application's choice) or, with `None`, the key after the
/// last bind posted (`ibv_bind_mw`, which chooses it for the application).
/// `send_flags` are the work request's (or `ibv_mw_bind`'s): unsignalled without
/// `IBV_SEND_SIGNALED` on a QP without `sq_sig_all` (ibv_post_send(3), ibv_bind_mw(3)),
/// fenced with `IBV_SEND_FENCE`.
fn post_bind(
    q: &Qp,
    wr_id: u64,
    mw: *mut ibv_mw,
    info: &ibv_mw_bind_info,
    send_flags: c_uint,
    key: Option<u8>,
) -> Result<u32, Posted> {
    // ibv_bind_mw(3): with IBV_ACCESS_ZERO_BASED "the address set on the 'remote_addr'
    // field on the WR will be an offset from the MW's start address". The engine's windows
    // take the region's Tagged Offsets (as zero-based regions, ibv_reg_mr's EOPNOTSUPP, are
    // not supported either): refused, where it was dropped and the window bound at
    // addresses the peer, sending offsets, would never hit.
    if info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return Err(EOPNOTSUPP.into());
    }
    // SAFETY: mw and the region are ours (ibv_bind_mw(3), IBV_WR_BIND_MW). A shared
    // reference: another thread may be binding the same window (the `&mut` made here was
    // two aliasing `&mut` then, undefined behaviour); what the bind changes, `rkey`, is in
    // a cell ([`Mw::set_rkey`]).
    let (Some(w), Some(m)) = (unsafe { mw.cast::<Mw>().as_ref() }, unsafe {
        info.mr.cast::<Mr>().as_ref()
    }) else {
        // Unbinding (no region) is not supported: invalidate the window instead.
        return Err(EINVAL.into());
    };
    let region = m.mr.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mr) = region.as_ref() else {
        // Being deregistered on another thread right now.
        return Err(EINVAL.into());
    };
    // The window's address is in the region's address (iova) space; the verbs take the
    // offset in the region. Below the region it is out of bounds, as past its end.
    let Some(offset) = info.addr.checked_sub(mr.base_to()) else {
        return Err(wv::Error::Stag(wv::MemError::OutOfBounds).into());
    };
    let signaled = q.sig_all || send_flags & IBV_SEND_SIGNALED != 0;
    let fenced = send_flags & IBV_SEND_FENCE != 0;
    let access = window_access(info.mw_access_flags);
    let _bind = w.bind.lock().unwrap_or_else(|e| e.into_inner());
    let stag = q.qp.post_bind_mw_with_key(
        wr_id,
        &w.mw,
        mr,
        offset,
        info.length,
        access,
        key,
        signaled,
        fenced,
    )?;
    w.set_rkey(stag);
    Ok(stag)
}

unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    guard(EIO, || {
        // SAFETY: qp is ours; bind the caller's.
        let (Some(q), Some(b)) = (unsafe { qp_ref(qp) }, unsafe { bind.as_ref() }) else {
            return EINVAL;
        };
        match post_bind(q, b.wr_id, mw, &b.bind_info, b.send_flags, None) {
            Ok(_) => 0,
            Err(Posted::Errno(e)) => e,
            // ibv_bind_mw(3) posts a bind work request: on a QP closing or failed it
            // completes flushed, as IBV_WR_BIND_MW through ibv_post_send does (and as
            // mlx5's and rxe's ibv_bind_mw, which post one, answer); the window keeps its
            // rkey. It was EINVAL, nothing posted.
            Err(Posted::Engine(e)) if flushes(&e) => match q.qp.post_send_flushed(b.wr_id) {
                Ok(()) => 0,
                Err(e) => errno_of(&e),
            },
            Err(Posted::Engine(e)) => errno_of(&e),
        }
    })
}

// ---------------------------------------------------------------- completion channels and queues

#[repr(C)]
pub(crate) struct Chan {
    ibv: ibv_comp_channel,
    ch: wv::CompletionChannel,
    /// Our CQs on this channel, by engine id, to turn an event back into its `ibv_cq`.
    /// `ibv_get_cq_event` counts an event on a CQ while holding this lock, and
    /// `ibv_destroy_cq` takes the CQ out under it before waiting for the events counted.
    cqs: Mutex<std::collections::HashMap<u64, usize>>,
}

#[no_mangle]
pub extern "C" fn __wc_ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(null_mut(), || {
        if !check_ctx(c) {
            set_errno(EINVAL);
            return null_mut();
        }
        let Ok(e) = engine() else {
            set_errno(ENODEV);
            return null_mut();
        };
        match e.ctx.create_comp_channel() {
            Ok(ch) => {
                let fd = ch.as_raw_fd();
                Box::into_raw(Box::new(Chan {
                    ibv: ibv_comp_channel {
                        context: c,
                        fd,
                        refcnt: 0,
                    },
                    ch,
                    cqs: Mutex::default(),
                }))
                .cast()
            }
            Err(err) => {
                set_errno(errno_of(&err));
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    guard(EIO, || {
        if ch.is_null() {
            return EINVAL;
        }
        // SAFETY: ch came from ibv_create_comp_channel.
        let c = unsafe { &*ch.cast::<Chan>() };
        if !c.cqs.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            // ibv_destroy_comp_channel(3): fails while CQs still use it.
            return crate::EBUSY;
        }
        // SAFETY: as above; no CQ refers to it.
        drop(unsafe { Box::from_raw(ch.cast::<Chan>()) });
        0
    })
}

#[repr(C)]
pub(crate) struct Cq {
    /// The application's `struct ibv_cq`. In a cell: its `cq_context` is the
    /// application's to change after `ibv_create_cq` (rdma-core hands it back from
    /// `ibv_get_cq_event` and never writes it again; C callers set it after the create,
    /// from any thread), while other threads hold the `&Cq` of their own calls
    /// (`ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_ack_cq_events`, the dispatcher's CQ error).
    /// A `&Cq` whose bytes another thread writes asserted they did not change (undefined
    /// behaviour in the library, whatever field it then read). Read a field at a time
    /// through the cell's raw pointer ([`Cq::cq_context`]), never a reference to it.
    ibv: UnsafeCell<ibv_cq>,
    pub cq: wv::CompletionQueue,
    chan: *mut Chan,
    /// The QPs completing into it (a QP whose send and receive CQ it is counts twice).
    uses: Uses,
    /// Its completion events: delivered by `ibv_get_cq_event`, acknowledged by
    /// `ibv_ack_cq_events`; `ibv_destroy_cq` waits (on `all_acked`) until they are equal.
    events: Mutex<Events>,
    all_acked: Condvar,
}

impl Cq {
    /// The application's `cq->cq_context`, read as rdma-core's `ibv_get_cq_event` reads
    /// it: the one field, by value.
    fn cq_context(&self) -> *mut c_void {
        // SAFETY: the cell's pointer is valid for as long as `self` is; one pointer-sized,
        // aligned field is read through it with no reference to the struct, so an
        // application's store to this or another field of it does not invalidate any
        // reference of ours. The read races only with a store to `cq_context` made while
        // an `ibv_get_cq_event` of this CQ runs, the application's own race (rdma-core's
        // `ibv_get_cq_event` makes the same plain read).
        unsafe { (*self.ibv.get()).cq_context }
    }
}

/// A CQ's completion event counts (ibv_get_cq_event(3)).
#[derive(Default)]
struct Events {
    delivered: u64,
    acked: u64,
    /// Its `IBV_EVENT_CQ_ERR` queued or delivered and not yet acknowledged
    /// (`ibv_ack_async_event`).
    async_unacked: u64,
}

/// Whether a post failed only because the QP is closing or in error: the verbs complete
/// such a request with `IBV_WC_WR_FLUSH_ERR` instead of failing the post (what every
/// provider does; perftest reposts a receive after the peer has closed). It is handed to
/// the engine core to be flushed there (`QueuePair::post_send_flushed`,
/// `post_recv_late`), behind the requests posted before it: completed on the posting
/// thread it overtook those still draining in a graceful close.
fn flushes(e: &wv::Error) -> bool {
    matches!(
        e,
        wv::Error::InvalidState(wv::QpState::Closing | wv::QpState::Terminate | wv::QpState::Error)
    )
}

/// # Safety
/// `p` is NULL or a CQ from [`__wc_ibv_create_cq`].
pub(crate) unsafe fn cq_ref<'a>(p: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: per the contract.
    unsafe { p.cast::<Cq>().as_ref() }
}

#[no_mangle]
pub extern "C" fn __wc_ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(null_mut(), || {
        // The device has one completion vector (`num_comp_vectors` 1): another is EINVAL,
        // as uverbs refuses a comp_vector at or above the device's count.
        if !check_ctx(c) || cqe < 1 || comp_vector != 0 {
            set_errno(EINVAL);
            return null_mut();
        }
        let Ok(e) = engine() else {
            set_errno(ENODEV);
            return null_mut();
        };
        // max_cq queues live: ENOMEM, as siw_create_cq answers past SIW_MAX_CQ.
        if let Err(err) = CQS.take() {
            set_errno(err);
            return null_mut();
        }
        let depth = cqe as usize;
        let chan = channel.cast::<Chan>();
        // SAFETY: channel is NULL or ours.
        let r = match unsafe { chan.as_ref() } {
            Some(ch) => e.ctx.create_cq_with_channel(depth, &ch.ch),
            None => e.ctx.create_cq(depth),
        };
        if r.is_err() {
            CQS.give_back();
        }
        match r {
            Ok(cq) => {
                let id = cq.id();
                let b = Box::into_raw(Box::new(Cq {
                    ibv: UnsafeCell::new(ibv_cq {
                        context: c,
                        channel,
                        cq_context,
                        cqe,
                        ..Default::default()
                    }),
                    cq,
                    chan,
                    uses: Uses::default(),
                    events: Mutex::default(),
                    all_acked: Condvar::new(),
                }));
                // SAFETY: chan is NULL or ours.
                if let Some(ch) = unsafe { chan.as_ref() } {
                    ch.cqs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id, b as usize);
                }
                cqs().insert(id, b as usize);
                b.cast()
            }
            Err(err) => {
                set_errno(errno_of(&err));
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(EIO, || {
        // SAFETY: cq is NULL or came from ibv_create_cq.
        let Some(c) = (unsafe { cq_ref(cq) }) else {
            return EINVAL;
        };
        // ibv_create_cq(3): destroying fails while a QP uses the CQ (the QP would write
        // its completions, flushed ones included, into freed memory).
        if c.uses.busy() {
            return crate::EBUSY;
        }
        // Off its channel first: ibv_get_cq_event delivers no event of it after this.
        // SAFETY: its channel outlives it (destroying a channel in use is refused).
        if let Some(ch) = unsafe { c.chan.as_ref() } {
            ch.cqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&c.cq.id());
            // Its events still waiting on the channel go too, as the kernel's uverbs
            // deletes them (ib_uverbs_release_ucq): they kept the descriptor readable, and
            // an ibv_get_cq_event after poll(2) said so blocked.
            c.cq.forget_events();
        }
        // ibv_get_cq_event(3): "destroying a CQ will wait for all completion events to be
        // acknowledged" (the application may still hold the CQ of an event it has not
        // acknowledged; rdma-core waits likewise). The same for its asynchronous CQ error:
        // one still queued is taken back, one delivered is waited for
        // (ibv_get_async_event(3)).
        cqs().remove(&c.cq.id());
        let purged = purge_async(IBV_EVENT_CQ_ERR, cq.cast());
        let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.async_unacked = ev.async_unacked.saturating_sub(purged);
        while ev.acked < ev.delivered || ev.async_unacked > 0 {
            ev = c.all_acked.wait(ev).unwrap_or_else(|e| e.into_inner());
        }
        drop(ev);
        // SAFETY: cq came from ibv_create_cq; no QP uses it, no event of it can be
        // delivered any more (it is off its channel) and every one delivered has been
        // acknowledged, so nothing else refers to it.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
        CQS.give_back();
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn __wc_ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        if ch.is_null() || cq.is_null() || cq_context.is_null() {
            set_errno(EINVAL);
            return -1;
        }
        // SAFETY: ch came from ibv_create_comp_channel.
        let c = unsafe { &*ch.cast::<Chan>() };
        let timeout = nonblocking(c.ibv.fd).then_some(Duration::ZERO);
        loop {
            match c.ch.get_event(timeout) {
                Ok(q) => {
                    let cqs = c.cqs.lock().unwrap_or_else(|e| e.into_inner());
                    // An event of a CQ destroyed meanwhile: wait for the next one.
                    let Some(&p) = cqs.get(&q.id()) else { continue };
                    let p = p as *mut Cq;
                    // SAFETY: p is registered on this channel and we hold the channel's
                    // lock: ibv_destroy_cq takes a CQ off the channel under this lock
                    // before it frees it, so the CQ is alive here.
                    let r = unsafe { &*p };
                    // Counted before the lock is released: a destroy that takes the CQ off
                    // after this waits for this event's acknowledgement.
                    r.events.lock().unwrap_or_else(|e| e.into_inner()).delivered += 1;
                    let context = r.cq_context();
                    drop(cqs);
                    // SAFETY: out-pointers are the caller's (checked non-NULL above).
                    unsafe {
                        *cq = p.cast();
                        *cq_context = context;
                    }
                    return 0;
                }
                Err(wv::Error::Timeout) => {
                    set_errno(EAGAIN);
                    return -1;
                }
                Err(e) => {
                    set_errno(errno_of(&e));
                    return -1;
                }
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    guard((), || {
        // SAFETY: cq is NULL or a CQ of ours whose events the caller acknowledges: it is
        // not freed before they are (ibv_destroy_cq waits for this acknowledgement).
        let Some(c) = (unsafe { cq_ref(cq) }) else {
            return;
        };
        let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.acked += u64::from(n);
        // Under the lock: a waiting destroy frees the CQ only after this guard is dropped.
        c.all_acked.notify_all();
    })
}

pub(crate) fn wc_of(c: &Completion) -> ibv_wc {
    let mut w: ibv_wc = Default::default();
    w.wr_id = c.wr_id;
    w.status = match c.status {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::FlushErr => IBV_WC_WR_FLUSH_ERR,
        WcStatus::LocalProtection => IBV_WC_LOC_PROT_ERR,
        WcStatus::MwBind => IBV_WC_MW_BIND_ERR,
        WcStatus::LocalLength => IBV_WC_LOC_LEN_ERR,
        WcStatus::RemoteAccess => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemoteOperation => IBV_WC_REM_OP_ERR,
        WcStatus::Fatal => IBV_WC_FATAL_ERR,
    };
    w.opcode = match c.opcode {
        WcOpcode::Send | WcOpcode::Immediate => IBV_WC_SEND,
        WcOpcode::Write | WcOpcode::WriteWithImm => IBV_WC_RDMA_WRITE,
        WcOpcode::Read => IBV_WC_RDMA_READ,
        WcOpcode::AtomicCmpSwap => IBV_WC_COMP_SWAP,
        WcOpcode::AtomicFetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInvalidate | WcOpcode::FastReg => IBV_WC_LOCAL_INV,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvImm => IBV_WC_RECV_RDMA_WITH_IMM,
    };
    w.byte_len = c.byte_len;
    w.qp_num = c.qp.qpn();
    w.src_qp = 0;
    if let Some(imm) = c.imm {
        // verbs carry 32 immediate bits in network order; RFC 7306 carries 64 (what we
        // send is the 32-bit value, so the low half round-trips).
        w.__bindgen_anon_1.imm_data = (imm as u32).to_be();
        w.wc_flags |= IBV_WC_WITH_IMM;
    } else if let Some(stag) = c.invalidated {
        w.__bindgen_anon_1.invalidated_rkey = stag;
        w.wc_flags |= IBV_WC_WITH_INV;
    }
    w
}

/// `ibv_poll_cq` calls that found nothing: an application waiting in them runs the engine
/// itself (caller-driven mode), and the background driver (`cm`) stays off its CPU.
pub(crate) static EMPTY_POLLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        let got = poll_cq_inner(cq, n, wc);
        if got == 0 {
            EMPTY_POLLS.fetch_add(1, Ordering::Relaxed);
        }
        got
    })
}

/// `poll_cq`'s body (run under its guard).
fn poll_cq_inner(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: cq is one of ours (ibv_poll_cq(3)).
    let Some(q) = (unsafe { cq_ref(cq) }) else {
        return -1;
    };
    if n <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -1;
    }
    let mut done = 0usize;
    let mut buf = [Completion {
        wr_id: 0,
        qp: wv::QpId {
            core: 0,
            index: 0,
            generation: 0,
        },
        opcode: WcOpcode::Send,
        status: WcStatus::Success,
        byte_len: 0,
        solicited: false,
        invalidated: None,
        imm: None,
        atomic_orig: None,
    }; 16];
    while done < n as usize {
        let want = (n as usize - done).min(buf.len());
        let got = q.cq.poll(&mut buf[..want]);
        for (i, c) in buf[..got].iter().enumerate() {
            // SAFETY: wc has room for n entries (ibv_poll_cq(3)); done + i < n.
            unsafe { wc.add(done + i).write(wc_of(c)) };
        }
        done += got;
        if got < want {
            break;
        }
    }
    done as c_int
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard(EIO, || {
        // SAFETY: cq is one of ours.
        let Some(q) = (unsafe { cq_ref(cq) }) else {
            return EINVAL;
        };
        match q.cq.req_notify(solicited_only != 0) {
            // A CQ made without a channel: rdma-core's providers arm it all the same and
            // return 0 (nothing ever reads the notification), so arming it succeeds and
            // changes nothing.
            Ok(()) | Err(wv::Error::NoChannel) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

// ---------------------------------------------------------------- shared receive queues

#[repr(C)]
pub(crate) struct Srq {
    /// The application's `struct ibv_srq`. In a cell, as [`Cq::ibv`]: its `srq_context`
    /// is the application's to change after `ibv_create_srq`, while other threads hold the
    /// `&Srq` of their calls (`ibv_post_srq_recv`, the dispatcher's limit event). Read a
    /// field at a time through the cell's raw pointer, never a reference to it.
    ibv: UnsafeCell<ibv_srq>,
    pub srq: wv::SharedReceiveQueue,
    /// The QPs receiving through it.
    uses: Uses,
    /// Its `IBV_EVENT_SRQ_LIMIT_REACHED` queued or delivered and not yet acknowledged:
    /// `ibv_destroy_srq` waits (on `all_acked`) until there is none.
    async_unacked: Mutex<u64>,
    all_acked: Condvar,
}

/// The live SRQs by the engine's id of their queue (what [`wv::CmEvent::SrqLimitReached`]
/// names), pointers as usize: created by `ibv_create_srq`, removed first by
/// `ibv_destroy_srq`.
fn srqs() -> std::sync::MutexGuard<'static, std::collections::HashMap<u64, usize>> {
    static M: OnceLock<Mutex<std::collections::HashMap<u64, usize>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Queues `IBV_EVENT_SRQ_LIMIT_REACHED` for the SRQ whose engine queue is `id`
/// (ibv_modify_srq(3): "Modifying the srq_limit arms the SRQ to produce an
/// IBV_EVENT_SRQ_LIMIT_REACHED ... asynchronous event once the number of WRs in the SRQ
/// drops below srq_limit"; the engine core whose claim crossed the limit reported it, and
/// the engine disarmed it), with `element.srq` naming it; nothing if the SRQ was destroyed
/// meanwhile. Until the event is acknowledged the SRQ's destroy waits.
pub(crate) fn push_srq_limit(id: u64) {
    let map = srqs();
    let Some(&p) = map.get(&id) else { return };
    // SAFETY: a registered SRQ is live (ibv_destroy_srq unregisters it under this lock
    // first).
    let s = unsafe { &*(p as *const Srq) };
    *s.async_unacked.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    let mut ev = ibv_async_event {
        event_type: IBV_EVENT_SRQ_LIMIT_REACHED,
        ..Default::default()
    };
    ev.element.srq = p as *mut ibv_srq;
    push_async(ev);
    drop(map);
}

#[no_mangle]
pub extern "C" fn __wc_ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard(null_mut(), || {
        // SAFETY: pd is NULL or ours; attr is the caller's.
        let (Some(p), Some(a)) = (unsafe { pd_ref(pd) }, unsafe { attr.as_mut() }) else {
            set_errno(EINVAL);
            return null_mut();
        };
        // max_srq queues live: ENOMEM, as siw_create_srq answers past SIW_MAX_SRQ.
        if let Err(err) = SRQS.take() {
            set_errno(err);
            return null_mut();
        }
        let r = p.pd.create_srq(a.attr.max_wr.max(1), a.attr.max_sge.max(1));
        if r.is_err() {
            SRQS.give_back();
        }
        match r {
            Ok(srq) => {
                // Local keys checked when a message is placed, as for a QP's receives
                // (`create_qp`): ibv_post_srq_recv(3) accepts a bad lkey as siw does.
                srq.set_sges_checked_at_post(false);
                a.attr.max_wr = srq.depth();
                a.attr.max_sge = srq.max_sge();
                let b = Box::new(Srq {
                    ibv: UnsafeCell::new(ibv_srq {
                        context: p.ibv.context,
                        srq_context: a.srq_context,
                        pd,
                        ..Default::default()
                    }),
                    srq,
                    uses: Uses::default(),
                    async_unacked: Mutex::default(),
                    all_acked: Condvar::new(),
                });
                p.uses.add();
                let id = b.srq.id();
                let b = Box::into_raw(b);
                srqs().insert(id, b as usize);
                b.cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_modify_srq(
    s: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard(EIO, || {
        // SAFETY: s is ours; attr the caller's.
        let (Some(q), Some(a)) = (unsafe { s.cast::<Srq>().as_ref() }, unsafe {
            attr.as_ref()
        }) else {
            return EINVAL;
        };
        if mask as c_uint & IBV_SRQ_MAX_WR != 0 {
            return EOPNOTSUPP; // no resize
        }
        if mask as c_uint & IBV_SRQ_LIMIT != 0 {
            // The engine reports the crossing as `CmEvent::SrqLimitReached`, which the CM
            // dispatcher turns into the asynchronous event (`push_srq_limit`).
            if let Err(e) = q.srq.arm_limit(a.srq_limit) {
                return errno_of(&e);
            }
        }
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_query_srq(s: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(EIO, || {
        // SAFETY: s is ours; attr the caller's.
        let (Some(q), Some(a)) = (unsafe { s.cast::<Srq>().as_ref() }, unsafe {
            attr.as_mut()
        }) else {
            return EINVAL;
        };
        a.max_wr = q.srq.depth();
        // What the queue was created with, which its posts are checked against.
        a.max_sge = q.srq.max_sge();
        // 0 once reached: the engine disarms it as the verbs do.
        a.srq_limit = q.srq.armed_limit();
        0
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_destroy_srq(s: *mut ibv_srq) -> c_int {
    guard(EIO, || {
        // SAFETY: s is NULL or ours (the matching create).
        let Some(q) = (unsafe { s.cast::<Srq>().as_ref() }) else {
            return EINVAL;
        };
        // ibv_create_srq(3): destroying fails while a QP uses the SRQ.
        if q.uses.busy() {
            return crate::EBUSY;
        }
        // Its limit event: no new one (out of the registry), a queued one taken back, a
        // delivered one waited for until acknowledged (ibv_get_async_event(3)).
        srqs().remove(&q.srq.id());
        let purged = purge_async(IBV_EVENT_SRQ_LIMIT_REACHED, s.cast());
        let mut n = q.async_unacked.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(purged);
        while *n > 0 {
            n = q.all_acked.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        drop(n);
        // SAFETY: the cell's pointer is valid while `q` is; `pd`, which only the create
        // wrote, read through it by value (see `Srq::ibv`).
        let pd = unsafe { (*q.ibv.get()).pd };
        // SAFETY: s is ours, no longer used by the caller nor by any QP.
        let r = unsafe { destroy::<_, Srq>(s) };
        if r == 0 {
            SRQS.give_back();
            if let Some(u) = pd_uses(pd) {
                u.remove();
            }
        }
        r
    })
}

/// The SGE list of a work request, of at most `max` entries (the limit of the queue it is
/// posted to: ibv_post_send(3) and ibv_post_recv(3) fail with `EINVAL` above it).
///
/// # Safety
/// `sg` is valid for `n` entries when `n > 0`.
unsafe fn sges<'a>(sg: *const ibv_sge, n: c_int, max: u32) -> Result<&'a [ibv_sge], c_int> {
    if n < 0 || n as usize > wv::MAX_SGE || n as u32 > max {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if sg.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(sg, n as usize) })
}

fn to_sges(s: &[ibv_sge]) -> ([Sge; wv::MAX_SGE], usize) {
    let mut out = [Sge {
        stag: 0,
        to: 0,
        len: 0,
    }; wv::MAX_SGE];
    for (o, i) in out.iter_mut().zip(s) {
        *o = Sge {
            stag: i.lkey,
            to: i.addr,
            len: i.length,
        };
    }
    (out, s.len())
}

unsafe extern "C" fn post_srq_recv(
    s: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(EIO, || {
        // SAFETY: s is ours.
        let Some(q) = (unsafe { s.cast::<Srq>().as_ref() }) else {
            return EINVAL;
        };
        post_recv_list(
            wr,
            bad,
            q.srq.max_sge(),
            |r| q.srq.post_recv(r),
            |r| q.srq.post_recv(r),
        )
    })
}

fn post_recv_list(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    max_sge: u32,
    post: impl Fn(&wv::RecvWr) -> Result<(), wv::Error>,
    late: impl Fn(&wv::RecvWr) -> Result<(), wv::Error>,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: the caller's list of work requests (ibv_post_recv(3)).
        let w = unsafe { &*wr };
        // SAFETY: sg_list holds num_sge entries.
        let r = unsafe { sges(w.sg_list, w.num_sge, max_sge) }.and_then(|s| {
            let (v, n) = to_sges(s);
            wv::RecvWr::new(w.wr_id, &v[..n]).map_err(|e| errno_of(&e))
        });
        // A QP closing or failed takes it to be flushed, behind the receives posted before
        // it (or filled by a message still arriving while it closes).
        let r = r.and_then(|rw| match post(&rw) {
            Err(e) if flushes(&e) => late(&rw).map_err(|e| errno_of(&e)),
            r => r.map_err(|e| errno_of(&e)),
        });
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: bad is the caller's out-pointer.
                unsafe { *bad = wr };
            }
            return e;
        }
        wr = w.next;
    }
    0
}

// ---------------------------------------------------------------- queue pairs

#[repr(C)]
pub(crate) struct Qp {
    /// The application's `struct ibv_qp`. In a cell: the CM dispatcher and
    /// `ibv_modify_qp` store `state` ([`set_qp_state`], an atomic store through the raw
    /// pointer) while other threads hold the `&Qp` of their own calls, and a `&Qp` whose
    /// bytes another thread writes asserted they did not change (undefined behaviour, as
    /// a `&mut` aliasing it would be). Read a field at a time through [`Qp::ibv_ptr`].
    ibv: UnsafeCell<ibv_qp>,
    pub qp: wv::QueuePair,
    sig_all: bool,
    max_inline: u32,
    cap: ibv_qp_cap,
    srq: bool,
    /// The application moved the QP to ERR (`ibv_modify_qp`), which aborts its connection:
    /// set before the engine is asked, so the CM dispatcher thread, which may see the
    /// engine's `Disconnected` before `ibv_modify_qp` returns, tells our own abort of a
    /// connection being set up from the peer's doing (`cm::closed_before_established`).
    pub aborted: AtomicBool,
    /// The connection's negotiated IRD (high 16 bits) and ORD (low 16), set when it is
    /// established ([`set_qp_ird_ord`]), for `ibv_query_qp`'s `max_dest_rd_atomic` and
    /// `max_rd_atomic`; 0 before.
    ird_ord: AtomicU32,
    /// Its `IBV_EVENT_QP_LAST_WQE_REACHED` (a QP on an SRQ only): raised once per entry
    /// into the error state, and how many are queued or delivered and not yet acknowledged
    /// (`ibv_destroy_qp` waits on `all_acked` until none is). Also the lock that orders
    /// the application's moves to ERR and RESET (the engine's `abort` or `reset` and the
    /// store in `qp->state`) against what the CM dispatcher decides from the engine's
    /// state: the ERR or RTS it stores for a connection's event ([`set_qp_state_if`],
    /// [`set_qp_rts_established`]) and
    /// the Last WQE Reached it raises ([`raise_last_wqe`]), so that nothing decided before
    /// the application's move is stored after it.
    last_wqe: Mutex<LastWqe>,
    all_acked: Condvar,
}

/// A QP's Last WQE Reached event state ([`Qp::last_wqe`]).
#[derive(Default)]
struct LastWqe {
    /// Raised for the QP's current stay in the error state: a second way into it (the
    /// application's move to ERR and the engine's event of the connection it aborted, or a
    /// Terminate and then the stream's close) raises no second event. Cleared when the QP
    /// is reset (ERR -> RESET), so its next failure raises one again.
    raised: bool,
    /// Queued or delivered and not yet acknowledged.
    unacked: u64,
    /// The application's state moves (`ibv_modify_qp` with `IBV_QP_STATE`, each that
    /// succeeded), counted under this lock.
    moves: u64,
    /// `moves` when the QP's current connection started (`rdma_connect`, `rdma_accept`):
    /// ESTABLISHED stores RTS only if the application has made no move since
    /// ([`set_qp_rts_established`]).
    moves_at_connect: u64,
}

impl Qp {
    /// The application's `struct ibv_qp`, to read one field at a time (`pd`, the CQs,
    /// the SRQ, `qp_context`: fixed when the QP was made), never a reference to it.
    fn ibv_ptr(&self) -> *mut ibv_qp {
        self.ibv.get()
    }

    /// The engine's abort (RST, everything outstanding flushed), marked as the
    /// application's own doing first ([`Qp::aborted`]).
    fn abort(&self) -> Result<(), wv::Error> {
        self.aborted.store(true, Ordering::Release);
        self.qp.abort()
    }
}

/// # Safety
/// `p` is NULL or a QP of ours.
pub(crate) unsafe fn qp_ref<'a>(p: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: per the contract.
    unsafe { p.cast::<Qp>().as_ref() }
}

/// The most SGEs of an RDMA Read (`max_sge_rd`): the engine places a Read Response into one
/// (`Error::ReadSgeCount` beyond it).
const MAX_SGE_RD: u32 = 1;

/// The most inline octets per work request a QP can be asked for (`max_inline_data`; more
/// is `EINVAL`).
const MAX_INLINE: u32 = 1024;

/// The inline octets every QP holds at least (the engine's own default,
/// `QpInit::max_inline`): a QP asked for fewer gets this many in `cap.max_inline_data`, as
/// real providers answer with the capacity their send queue entries give, at least the
/// request (siw its `SIW_MAX_INLINE`, mlx5 what the WQE size leaves); libfabric's verbs
/// provider, which asks small, offers the answer as its inject size. The engine copies
/// inline data into a per-QP arena of `max_send_wr` times the capacity, mapped and
/// registered at the QP's first inline post of at least one octet; a QP that never posts
/// inline costs nothing. The floor keeps that arena at 256 KiB for the deepest send queue
/// unless the application asks for more.
const INLINE_FLOOR: u32 = 256;

/// Creates an RC queue pair (`core`: the engine core of the connection request a passive
/// side accepts on).
pub(crate) fn create_qp(
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
    core: Option<usize>,
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: pd is NULL or ours.
    let p = unsafe { pd_ref(pd) }.ok_or(EINVAL)?;
    if attr.qp_type != IBV_QPT_RC {
        eprintln!(
            "warpcore: QP type {} is not supported: iWARP has reliable-connected QPs \
             (IBV_QPT_RC) only",
            attr.qp_type
        );
        return Err(EOPNOTSUPP);
    }
    // SAFETY: the CQs and SRQ are NULL or ours.
    let (scq, rcq) = unsafe { (cq_ref(attr.send_cq), cq_ref(attr.recv_cq)) };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        return Err(EINVAL);
    };
    // SAFETY: as above.
    let srq = unsafe { attr.srq.cast::<Srq>().as_ref() };
    let cap = &mut attr.cap;
    // Each queue keeps its own limit (ibv_query_qp reports it, a post is checked against
    // it); the engine's QP takes the larger. A QP on an SRQ has no receive queue of its
    // own: ibv_create_qp(3) "The attributes max_recv_wr and max_recv_sge are ignored by
    // ibv_create_qp() if the QP is to be associated with an SRQ" (its receives are the
    // SRQ's, bounded by the SRQ's own max_sge), so they are neither checked nor kept, and
    // both read 0 (rxe reports them so). A max_recv_sge above the device's limit
    // made such a QP EINVAL.
    let send_sge = cap.max_send_sge.max(1);
    let recv_sge = if srq.is_some() {
        0
    } else {
        cap.max_recv_sge.max(1)
    };
    let max_sge = send_sge.max(recv_sge);
    // A QP without a send queue (max_send_wr 0) is EINVAL, as siw_create_qp refuses it
    // ("QP must have send queue"; drivers/infiniband/sw/siw/siw_verbs.c): it was made with
    // a send queue of one entry the application never asked for.
    if cap.max_send_wr == 0 || max_sge as usize > wv::MAX_SGE || cap.max_inline_data > MAX_INLINE {
        return Err(EINVAL);
    }
    let mut init = QpInit::new(&scq.cq, &rcq.cq);
    init.sq_depth = cap.max_send_wr;
    // With an SRQ the QP's own receive queue is never used (the engine wants one of at
    // least one entry all the same).
    init.rq_depth = if srq.is_some() {
        1
    } else {
        cap.max_recv_wr.max(1)
    };
    init.max_sge = max_sge;
    init.core = core;
    let inline = cap.max_inline_data.max(INLINE_FLOOR);
    init.max_inline = inline;
    init.rfc7306 = engine().map(|e| e.rfc7306).unwrap_or(true);
    // Local keys checked when a request runs, not at post: ibv_post_send(3) and
    // ibv_post_recv(3) accept a bad lkey as siw, rxe and mlx5 do, and the request
    // completes with IBV_WC_LOC_PROT_ERR, the QP in the error state (the man pages list
    // no errno for a bad key).
    init.sges_checked_at_post = false;
    if let Some(s) = srq {
        init = init.with_srq(&s.srq);
    }
    let qp = p.pd.create_qp(&init).map_err(|e| errno_of(&e))?;
    p.uses.add();
    scq.uses.add();
    rcq.uses.add();
    if let Some(s) = srq {
        s.uses.add();
    }
    cap.max_send_sge = send_sge;
    cap.max_recv_sge = recv_sge;
    if srq.is_some() {
        cap.max_recv_wr = 0;
    }
    // The QP's inline capacity, at least what was asked (checked above).
    cap.max_inline_data = inline;
    let qpn = qp.id().qpn();
    let b = Box::new(Qp {
        ibv: UnsafeCell::new(ibv_qp {
            context: p.ibv.context,
            qp_context: attr.qp_context,
            pd,
            send_cq: attr.send_cq,
            recv_cq: attr.recv_cq,
            srq: attr.srq,
            handle: qpn,
            qp_num: qpn,
            // A new QP is in RESET, as rdma-core's ibv_create_qp leaves it (cmd_qp.c,
            // set_qp); rdma_create_qp moves it to INIT, as librdmacm's ucma_init_conn_qp.
            state: IBV_QPS_RESET,
            qp_type: IBV_QPT_RC,
            ..Default::default()
        }),
        qp,
        sig_all: attr.sq_sig_all != 0,
        max_inline: cap.max_inline_data,
        cap: *cap,
        srq: srq.is_some(),
        aborted: AtomicBool::new(false),
        ird_ord: AtomicU32::new(0),
        last_wqe: Mutex::default(),
        all_acked: Condvar::new(),
    });
    let id = b.qp.id();
    let p = Box::into_raw(b);
    if srq.is_some() {
        srq_qps().insert(id, p as usize);
    }
    live_qps().insert(p as usize);
    Ok(p.cast())
}

/// Every live QP, pointers as usize: registered by `create_qp`, removed first by
/// `ibv_destroy_qp` (under this lock, so a QP found here is not freed while the lock is
/// held). What [`close_at_exit`] closes.
fn live_qps() -> std::sync::MutexGuard<'static, std::collections::HashSet<usize>> {
    static M: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// How long [`close_at_exit`] waits for the graceful closes it starts before it resets
/// the connections still open.
const EXIT_GRACEFUL: Duration = Duration::from_millis(200);

/// How long [`close_at_exit`] lets the engine run once it is done, for its last segments
/// (the ACK of the peer's FIN, a RST) to leave the port before the process ends. The QP
/// leaves Closing when its TCP enters TIME-WAIT, as the peer's FIN is processed; the ACK
/// goes out in a later pass of the core: 50 ms, not 5, so that a core descheduled on a
/// loaded host still sends it (else the peer sits in LAST-ACK resending its FIN until its
/// TCP gives up).
const EXIT_LINGER: Duration = Duration::from_millis(50);

/// Closes every connection a QP of the process still holds, at its normal exit (`lib.rs`'s
/// `close_at_exit`), as the kernel does for a process that exits with connected ids: the
/// close of its `/dev/infiniband/rdma_cm` descriptor destroys each id (`ucma_close`,
/// `rdma_destroy_id`), and iw_cm's `destroy_cm_id` closes an ESTABLISHED connection
/// abruptly (`iwcm_modify_qp_err`: siw moves the QP to ERROR, flushing its queues, and
/// releases its socket, which sends a FIN, and no Terminate: `siw_qp_cm_drop`). Here the
/// engine's graceful close sends the FIN (a QP in RTS), and the wait for the peer's FIN
/// lets our ACK of it go out, so the peer's close completes at once too (it reports
/// DISCONNECTED when its FIN is acknowledged); a connection still being set up is reset
/// (the kernel's socket close of a connection in its MPA startup). A connection that has
/// not closed within [`EXIT_GRACEFUL`] (the peer silent, or the send queue stuck behind a
/// closed window) is reset: the process is about to end, and nothing would answer the
/// peer after that (without it, the peer learns only when its TCP gives up).
///
/// Nothing is freed (application threads still run during `atexit`): QPs, their
/// connections' events and the memory registrations stay as they are, and the events the
/// closes raise reach the ids' channels as any would. `ctx` runs caller-driven cores
/// meanwhile (`Context::progress`). `refused`: connection requests were just refused or
/// listeners unlistened (`cm::refuse_requests_at_exit`), whose answers (MPA Replies with
/// R = 1, RSTs, and the dispatcher's refusals of requests reported meanwhile) need
/// [`EXIT_LINGER`] to leave even when no connection is open.
pub(crate) fn close_at_exit(ctx: &wv::Context, refused: bool) {
    use wv::QpState as S;
    let live = live_qps();
    // SAFETY: a registered QP is live: `ibv_destroy_qp` takes it out under this lock,
    // held until the end, before it frees it.
    let qps: Vec<&Qp> = live
        .iter()
        .map(|&p| unsafe { &*(p as *const Qp) })
        .collect();
    let (mut open, mut reset) = (Vec::new(), false);
    for q in qps {
        match q.qp.state() {
            S::Rts => {
                if q.qp.disconnect().is_ok() {
                    open.push(q);
                } else {
                    reset |= q.abort().is_ok();
                }
            }
            S::Closing => open.push(q),
            S::Connecting => reset |= q.abort().is_ok(),
            S::Idle | S::Terminate | S::Error => {}
        }
    }
    if open.is_empty() && !reset && !refused {
        return;
    }
    let closing = |q: &Qp| matches!(q.qp.state(), S::Rts | S::Closing);
    let deadline = std::time::Instant::now() + EXIT_GRACEFUL;
    while open.iter().any(|q| closing(q)) && std::time::Instant::now() < deadline {
        ctx.progress();
        std::thread::sleep(Duration::from_micros(200));
    }
    for q in open.iter().filter(|q| closing(q)) {
        let _ = q.abort();
    }
    let end = std::time::Instant::now() + EXIT_LINGER;
    while std::time::Instant::now() < end {
        ctx.progress();
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(live);
}

/// `rdma_destroy_id` of an id whose QP the application still holds (it made the QP with
/// `ibv_create_qp`, or destroys it after the id): the connection ends as the kernel's
/// rdma_cm ends it. `rdma_destroy_id` -> `ucma_destroy_id` -> `rdma_destroy_id` (cma.c) ->
/// `iw_destroy_cm_id`, whose `destroy_cm_id` closes an ESTABLISHED connection abruptly
/// (`iwcm_modify_qp_err`: siw moves the QP to ERROR, flushing its queues, and releases its
/// socket, a FIN after what the socket already holds, no Terminate) and leaves a CLOSING
/// one to finish. Before, the connection stayed up: the peer learnt nothing until the QP
/// was destroyed or the process exited.
///
/// A QP in RTS starts the engine's graceful close (the FIN, after what the QP queued: a
/// Send whose completion the application saw may still be in the TCP send buffer, which
/// the kernel's socket would still send, where a reset would drop it); the peer reports
/// DISCONNECTED when its close completes, at once. The QP reads ERR in `qp->state` from
/// here (the kernel's move is synchronous), the engine's state follows when the close
/// completes (one round trip; bounded by `close_timeout_ms` and the FIN_WAIT_2 bound),
/// and its receives are flushed then (a send posted meanwhile is flushed at once). A
/// connection still being set up (an active connect under way) is reset, as
/// [`close_at_exit`] does. Nothing is freed: the QP is the application's to destroy,
/// and its id is gone, so no event of this connection reaches any channel (the kernel
/// reports none to a destroyed id). Does not wait: one command to the engine.
///
/// `mine`: the engine's QPs whose connections the id made (the registry's entries for it,
/// taken before they were removed). `id->qp` may name a QP the application already
/// destroyed (`ibv_destroy_qp` before `rdma_destroy_id` is allowed, and does not clear
/// it), or, freed and allocated again, another connection's QP: only a QP still in
/// [`live_qps`] (held until the end, so it is not freed meanwhile) whose engine QP the id
/// connected is closed.
pub(crate) fn close_on_destroy_id(qp: *mut ibv_qp, mine: &[wv::QpId]) {
    use wv::QpState as S;
    let live = live_qps();
    if qp.is_null() || !live.contains(&(qp as usize)) {
        return;
    }
    // SAFETY: a registered QP is live: `ibv_destroy_qp` takes it out under this lock,
    // held until the end, before it frees it.
    let Some(q) = (unsafe { qp_ref(qp) }) else {
        return;
    };
    if !mine.contains(&q.qp.id()) {
        return;
    }
    // Under the lock `ibv_modify_qp` holds across its moves (see `Qp::last_wqe`).
    let lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
    let closed = match q.qp.state() {
        S::Rts => q.qp.disconnect().is_ok() || q.abort().is_ok(),
        S::Connecting => q.abort().is_ok(),
        S::Idle | S::Closing | S::Terminate | S::Error => false,
    };
    if closed {
        set_qp_state(qp, IBV_QPS_ERR);
    }
    drop(lw);
    drop(live);
}

/// The live QPs that receive through an SRQ, by the engine's id (what the engine's
/// `CmEvent::Disconnected`, `Error` and `Rejected` name), pointers as usize: registered by
/// `create_qp`, removed first by `ibv_destroy_qp`. Only these raise
/// `IBV_EVENT_QP_LAST_WQE_REACHED`.
fn srq_qps() -> std::sync::MutexGuard<'static, std::collections::HashMap<wv::QpId, usize>> {
    static M: OnceLock<Mutex<std::collections::HashMap<wv::QpId, usize>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Queues `IBV_EVENT_QP_LAST_WQE_REACHED` (`element.qp` naming it) for a QP on an SRQ that
/// is in the error state, unless it was raised already for this stay there.
///
/// The semantics: ibv_get_async_event(3) (rdma-core `libibverbs/man/ibv_get_async_event.3`)
/// lists it as "Last WQE Reached on a QP associated with an SRQ"; the InfiniBand
/// specification (10.3.1, quoted by the kernel's `__ib_drain_srq` in
/// drivers/infiniband/core/verbs.c) has the consumer move such a QP to the error state and
/// wait for this event before destroying or resetting it: from then on the QP consumes no
/// more receive requests of the SRQ, and the completions of those it took (flushed) are in
/// its CQ. Providers raise it when the QP enters the error state: rdmavt's
/// `rvt_error_qp` (drivers/infiniband/sw/rdmavt/qp.c) once, not for a QP already in ERR or
/// still in RESET, after the flush; cxgb4, an iWARP RNIC, in `__flush_qp` for a QP in the
/// error state with an SRQ (drivers/infiniband/hw/cxgb4/qp.c, since 6.13), whatever moved
/// it there (the application's modify to ERR, a peer's abort, a Terminate, the stream's
/// close). siw raises none.
///
/// Here the engine's QP has flushed everything (and claims nothing more from the SRQ)
/// before `abort` returns and before it reports the connection's end, so the event goes
/// after those completions, after `qp->state` reads ERR and, for a connection that ended,
/// after its rdma_cm event was queued.
fn raise_last_wqe(q: &Qp, p: *mut ibv_qp) {
    let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
    // A QP reset meanwhile (ERR -> RESET by the application) is no longer in error: the
    // engine's state tells (checked under the lock the reset clears `raised` under).
    if lw.raised || !matches!(q.qp.state(), wv::QpState::Error | wv::QpState::Terminate) {
        return;
    }
    lw.raised = true;
    lw.unacked += 1;
    let mut ev = ibv_async_event {
        event_type: IBV_EVENT_QP_LAST_WQE_REACHED,
        ..Default::default()
    };
    ev.element.qp = p;
    push_async(ev);
}

/// The engine reported that the QP `id`'s connection ended or failed (it is in the error
/// state, its work requests flushed): `IBV_EVENT_QP_LAST_WQE_REACHED` if it receives
/// through an SRQ ([`raise_last_wqe`]); nothing for another QP, or one destroyed meanwhile.
pub(crate) fn qp_failed(id: wv::QpId) {
    let map = srq_qps();
    let Some(&p) = map.get(&id) else { return };
    // SAFETY: a registered QP is live (ibv_destroy_qp unregisters it under this lock
    // first).
    let q = unsafe { &*(p as *const Qp) };
    raise_last_wqe(q, p as *mut ibv_qp);
    drop(map);
}

#[no_mangle]
pub extern "C" fn __wc_ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(null_mut(), || {
        // SAFETY: attr is the caller's.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            set_errno(EINVAL);
            return null_mut();
        };
        match create_qp(pd, a, None) {
            Ok(q) => q,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(EIO, || {
        if qp.is_null() {
            return EINVAL;
        }
        // SAFETY: qp came from ibv_create_qp or rdma_create_qp.
        if let Some(q) = unsafe { qp_ref(qp) } {
            // No Last WQE Reached for a QP being destroyed (its graceful close below
            // included): out of the registry first. One still queued is taken back, one
            // delivered waited for until acknowledged (ibv_get_async_event(3): "destroying
            // an object (CQ, SRQ or QP) will wait for all affiliated events for the
            // object to be acknowledged").
            srq_qps().remove(&q.qp.id());
            live_qps().remove(&(qp as usize));
            linger(&q.qp);
            let purged = purge_async(IBV_EVENT_QP_LAST_WQE_REACHED, qp.cast());
            let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
            lw.unacked = lw.unacked.saturating_sub(purged);
            while lw.unacked > 0 {
                lw = q.all_acked.wait(lw).unwrap_or_else(|e| e.into_inner());
            }
        }
        crate::cm::forget_qp(qp);
        // SAFETY: as above; the application is done with it.
        let mut b = unsafe { Box::from_raw(qp.cast::<Qp>()) };
        let i = b.ibv.get_mut();
        let (pd, scq, rcq, srq) = (i.pd, i.send_cq, i.recv_cq, i.srq);
        drop(b);
        // The QP is gone: its PD, CQs and SRQ may be destroyed now (each outlived it,
        // its use counted).
        if let Some(u) = pd_uses(pd) {
            u.remove();
        }
        for c in [scq, rcq] {
            // SAFETY: the CQs are ours and live (a CQ with users is not freed).
            if let Some(c) = unsafe { cq_ref(c) } {
                c.uses.remove();
            }
        }
        // SAFETY: the SRQ is NULL or ours and live (an SRQ with users is not freed).
        if let Some(s) = unsafe { srq.cast::<Srq>().as_ref() } {
            s.uses.remove();
        }
        0
    })
}

/// Longest a destroy waits for a connected QP's graceful close.
const LINGER: Duration = Duration::from_secs(2);

/// Closes a connected QP gracefully before it is destroyed: what it has queued (a Send
/// whose completion the application has seen may still sit in the TCP send buffer) goes
/// out, then both FINs, as siw's destroy does on a kernel socket, instead of the engine's
/// abortive destroy (RST, unsent data dropped). Bounded by [`LINGER`].
/// A QP already closing (`rdma_disconnect`, or `rdma_destroy_id` of its id:
/// [`close_on_destroy_id`]) is given the same time to finish that close.
fn linger(qp: &wv::QueuePair) {
    match qp.state() {
        wv::QpState::Rts if qp.disconnect().is_ok() => {}
        wv::QpState::Closing => {}
        _ => return,
    }
    let deadline = std::time::Instant::now() + LINGER;
    while matches!(qp.state(), wv::QpState::Rts | wv::QpState::Closing)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Sets `qp->state`, the field the application reads (rdma-core's inline helpers and its
/// own code) while the connection manager's dispatcher thread, or another application
/// thread in `ibv_modify_qp`, may set it: an atomic store through the raw pointer, never
/// a write through a `&mut` that would alias the `&Qp` other threads hold (two plain
/// writes from two threads were a data race).
pub(crate) fn set_qp_state(qp: *mut ibv_qp, state: ibv_qp_state) {
    if qp.is_null() {
        return;
    }
    // SAFETY: qp is NULL (handled) or a live QP of ours; `state` is a 32-bit field aligned
    // as one, and every write this library makes to it is this atomic store.
    let field = unsafe { std::sync::atomic::AtomicU32::from_ptr(&raw mut (*qp).state) };
    field.store(state, std::sync::atomic::Ordering::Release);
}

/// Sets `qp->state` to `state` for a connection's event (the CM dispatcher: RTS for
/// ESTABLISHED, ERR for the event that ended the connection) if the engine's state of the
/// QP, read under the lock `ibv_modify_qp` holds across the engine's abort or reset and
/// its own store of ERR or RESET, passes `now`: a decision taken before an application's
/// move on another thread is never stored after it. Nothing for a NULL QP.
pub(crate) fn set_qp_state_if(
    qp: *mut ibv_qp,
    state: ibv_qp_state,
    now: impl FnOnce(wv::QpState) -> bool,
) {
    // SAFETY: qp is NULL or a live QP of ours (the caller's id holds it while registered).
    let Some(q) = (unsafe { qp_ref(qp) }) else {
        return;
    };
    let _lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
    if now(q.qp.state()) {
        set_qp_state(qp, state);
    }
}

/// A connection of `qp` starts (`rdma_connect`, `rdma_accept`): the application's state
/// moves from here on are its own word on `qp->state` ([`set_qp_rts_established`]). The
/// mark it replaces, for [`connection_not_started`].
pub(crate) fn connection_starts(qp: *mut ibv_qp) -> u64 {
    // SAFETY: qp is NULL or a live QP of ours (the caller's id holds it).
    let Some(q) = (unsafe { qp_ref(qp) }) else {
        return 0;
    };
    let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
    let moves = lw.moves;
    std::mem::replace(&mut lw.moves_at_connect, moves)
}

/// The connection [`connection_starts`] announced did not start (a second `rdma_connect`
/// on a connection under way, say): the mark goes back to `before`, the one it replaced.
pub(crate) fn connection_not_started(qp: *mut ibv_qp, before: u64) {
    // SAFETY: as in connection_starts.
    if let Some(q) = unsafe { qp_ref(qp) } {
        q.last_wqe
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .moves_at_connect = before;
    }
}

/// `qp->state` to RTS for its connection's ESTABLISHED (the CM dispatcher), while the
/// engine's QP is connected (not moved to ERR or reset on another thread since the engine
/// reported it) and the application has not moved the QP itself since the connection
/// started. RTS stands for what librdmacm does on its own (rdma_accept's RTR and RTS;
/// on InfiniBand the active side's at the connect response), never after a move of the
/// application's: with rdma-core over a kernel iWARP provider nothing but the
/// application's calls writes the field (the kernel's iw_cm moves the QP to RTS without
/// it), so an application's RESET, INIT, RTR or RTS made while its connection was set up
/// is what it reads after ESTABLISHED. It was overwritten with RTS.
pub(crate) fn set_qp_rts_established(qp: *mut ibv_qp) {
    // SAFETY: qp is NULL or a live QP of ours (the caller's id holds it while registered).
    let Some(q) = (unsafe { qp_ref(qp) }) else {
        return;
    };
    let lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
    if lw.moves == lw.moves_at_connect
        && matches!(q.qp.state(), wv::QpState::Rts | wv::QpState::Closing)
    {
        set_qp_state(qp, IBV_QPS_RTS);
    }
}

/// Records the negotiated IRD and ORD of `qp`'s connection as it is established (the
/// connection manager's dispatcher), which `ibv_query_qp` reports.
pub(crate) fn set_qp_ird_ord(qp: *mut ibv_qp, ird: u16, ord: u16) {
    // SAFETY: qp is NULL or a live QP of ours (the caller's id holds it).
    if let Some(q) = unsafe { qp_ref(qp) } {
        q.ird_ord
            .store(u32::from(ird) << 16 | u32::from(ord), Ordering::Release);
    }
}

/// Reads `qp->state` (an atomic load: see [`set_qp_state`]).
fn qp_state_field(qp: *mut ibv_qp) -> ibv_qp_state {
    // SAFETY: qp is a live QP of ours (the callers checked); as in set_qp_state.
    let field = unsafe { std::sync::atomic::AtomicU32::from_ptr(&raw mut (*qp).state) };
    field.load(std::sync::atomic::Ordering::Acquire)
}

#[no_mangle]
pub extern "C" fn __wc_ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    guard(EIO, || {
        // SAFETY: qp is ours; attr the caller's.
        let (Some(q), Some(a)) = (unsafe { qp_ref(qp) }, unsafe { attr.as_ref() }) else {
            return EINVAL;
        };
        if let Err(e) = modify_qp_mask_ok(a, mask as c_uint) {
            return e;
        }
        if mask as c_uint & IBV_QP_STATE == 0 {
            return 0;
        }
        match a.qp_state {
            // A move to ERR flushes every outstanding work request (the engine's abort:
            // a connected QP resets its stream, an idle one just flushes) before it
            // returns; a QP already in error or terminated stays so.
            IBV_QPS_ERR => {
                // Still in RESET (never moved on, never connected): as rdmavt's
                // rvt_error_qp, such a QP reaches ERR without a Last WQE Reached event.
                let from_reset =
                    qp_state_field(qp) == IBV_QPS_RESET && q.qp.state() == wv::QpState::Idle;
                // In ERR already while the close `rdma_destroy_id` started runs
                // ([`close_on_destroy_id`]): the kernel's QP is in ERROR and its socket,
                // released, still sends what it holds, so a move to ERR again ends nothing
                // early. The close is let finish first, as for RESET below ([`linger`]);
                // the abort at once reset the stream (RST) and dropped a Send whose
                // completion the application saw and TCP still held: the peer's receive
                // was flushed, not completed.
                if q.qp.state() == wv::QpState::Closing && qp_state_field(qp) == IBV_QPS_ERR {
                    linger(&q.qp);
                }
                // The abort and the store of ERR under the lock the dispatcher decides
                // qp->state under (set_qp_state_if): its RTS for an ESTABLISHED the engine
                // reported before this abort is stored before this ERR, never after it.
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                let r = q.abort();
                if let Ok(())
                | Err(wv::Error::InvalidState(wv::QpState::Error | wv::QpState::Terminate)) = r
                {
                    set_qp_state(qp, IBV_QPS_ERR);
                    lw.moves += 1;
                    if q.srq && from_reset {
                        // Counted as raised: the engine's report of the same stay in ERR
                        // raises none either.
                        lw.raised = true;
                    }
                }
                drop(lw);
                match r {
                    Ok(())
                    | Err(wv::Error::InvalidState(wv::QpState::Error | wv::QpState::Terminate)) => {
                        if q.srq && !from_reset {
                            raise_last_wqe(q, qp);
                        }
                        0
                    }
                    Err(e) => errno_of(&e),
                }
            }
            // A failed QP (ERR) goes back to RESET: the engine's reset flushes what is
            // left, lets its connection go and makes it idle as a new QP, ready for INIT
            // and reuse. From ERR no other state may be reached (the IB QP state machine,
            // the kernel's ib_modify_qp_is_ok): INIT, RTR, RTS are EINVAL, nothing changed.
            s @ (IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR | IBV_QPS_RTS)
                if matches!(q.qp.state(), wv::QpState::Error | wv::QpState::Terminate) =>
            {
                if s != IBV_QPS_RESET {
                    return EINVAL;
                }
                // Held across the reset and the stores: the dispatcher's ERR for the event
                // of the connection that failed (set_qp_state_if), or its Last WQE Reached,
                // decided from the engine's state before the reset, is not stored after it
                // (qp->state read ERR, a RESET QP, and no event followed to correct it).
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                reset_failed(q, qp, &mut lw)
            }
            // In error for the application while the engine still closes: rdma_destroy_id
            // closed the connection (`close_on_destroy_id` stored ERR, as the kernel's
            // iw_cm moves the QP to ERROR at once) and the graceful close has not
            // finished. As from ERR: INIT, RTR, RTS and SQD are EINVAL. RESET lets the close
            // finish first, as `ibv_destroy_qp` does ([`linger`]: one round trip, at most
            // [`LINGER`], then the engine's abort), and resets the QP, which is then idle
            // as a new one, as the kernel's (siw moves ERROR to IDLE; the socket it
            // released still sends what it holds, then its FIN). Not an abort at once: a
            // Send whose completion the application saw may still be in the TCP send
            // buffer, and a RST would drop it (the peer's receive flushed, not completed).
            // Before, these fell
            // to the arms below: 0 and `qp->state` as asked, the engine untouched (SQD:
            // the close already under way); the close then completed into ERR, so a RESET
            // and INIT the application was told succeeded left a failed QP: the receives
            // it posted after were flushed, and its next INIT was EINVAL.
            s @ (IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD)
                if q.qp.state() == wv::QpState::Closing && qp_state_field(qp) == IBV_QPS_ERR =>
            {
                if s != IBV_QPS_RESET {
                    return EINVAL;
                }
                // Not under the lock: the dispatcher stores under it what the close's end
                // decides.
                linger(&q.qp);
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                if q.qp.state() == wv::QpState::Closing {
                    // Not finished within LINGER: reset (the rest flushed).
                    match q.abort() {
                        // Aborted, or the close finished meanwhile (a failed QP now).
                        Ok(())
                        | Err(wv::Error::InvalidState(
                            wv::QpState::Error | wv::QpState::Terminate,
                        )) => {}
                        Err(e) => return errno_of(&e),
                    }
                }
                reset_failed(q, qp, &mut lw)
            }
            // The iWARP connection manager moves the QP to RTS when MPA completes; the
            // transitions an application makes before that (INIT, RTR, RTS, as librdmacm's
            // rdma_init_qp_attr tells it) change nothing in the engine. They succeed, and
            // qp->state takes the state asked for, as rdma-core's ibv_modify_qp sets it
            // after the provider succeeds (verbs.c). Stored and counted under the lock
            // ESTABLISHED's RTS is decided under: a move made while the connection is set
            // up is not overwritten by it (set_qp_rts_established).
            s @ (IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR | IBV_QPS_RTS) => {
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                set_qp_state(qp, s);
                lw.moves += 1;
                0
            }
            // A graceful close, as the iWARP providers take SQD from RTS and as librdmacm's
            // rdma_disconnect asks for it on iWARP (cma.c ucma_shutdown ->
            // ucma_modify_qp_sqd): siw maps it to CLOSING (siw_qp_nextstate_from_rts drops
            // the connection), cxgb4 to CLOSING (c4iw_modify_qp: rdma_fini, then a
            // non-abortive c4iw_ep_disconnect). The send queue drains, then FIN;
            // DISCONNECTED follows. A QP already closing stays so (0, as both answer a
            // move to the state it is in). From RESET, INIT, RTR (idle or connecting) or
            // ERR it is no move the QP state machine allows (the kernel's
            // ib_modify_qp_is_ok; cxgb4's IDLE -> CLOSING): EINVAL, nothing changed. It
            // was EOPNOTSUPP in every state.
            IBV_QPS_SQD => {
                // Under the lock ESTABLISHED's RTS is decided under, as the other moves.
                let mut lw = q.last_wqe.lock().unwrap_or_else(|e| e.into_inner());
                match q.qp.disconnect() {
                    Ok(()) => {
                        set_qp_state(qp, IBV_QPS_SQD);
                        lw.moves += 1;
                        0
                    }
                    Err(e) => errno_of(&e),
                }
            }
            _ => EINVAL,
        }
    })
}

/// The reset of a failed QP (the engine's in Error or Terminate) for `ibv_modify_qp`'s
/// move to RESET, `lw` held across the reset and the stores (see there): 0 or the errno.
fn reset_failed(q: &Qp, qp: *mut ibv_qp, lw: &mut LastWqe) -> c_int {
    match q.qp.reset() {
        Ok(()) => {
            // A connection set up from here on is not the one aborted.
            q.aborted.store(false, Ordering::Release);
            // Idle as a new QP: no connection's ORD and IRD for ibv_query_qp until the
            // next is established (they were the ended one's).
            q.ird_ord.store(0, Ordering::Release);
            // Its next entry into ERR raises Last WQE Reached again.
            lw.raised = false;
            set_qp_state(qp, IBV_QPS_RESET);
            lw.moves += 1;
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// What rdma-core and the kernel refuse of an `ibv_modify_qp` for every provider before
/// the provider sees it (so nothing is changed): a mask bit past `IBV_QP_DEST_QPN`
/// (`IBV_QP_RATE_LIMIT`, ...) is `EOPNOTSUPP`, as libibverbs' `ibv_cmd_modify_qp`
/// (cmd.c: "Masks over IBV_QP_DEST_QPN are only supported by ibv_cmd_modify_qp_ex"),
/// which siw's modify_qp calls, and the kernel's `ib_uverbs_modify_qp` answer; a port the
/// device does not have (`IBV_QP_PORT`, `IBV_QP_AV`'s, `IBV_QP_ALT_PATH`'s; it has port 1
/// only) and a state or current state past `IBV_QPS_ERR` are `EINVAL`, as uverbs_cmd.c's
/// `modify_qp` checks them (`rdma_is_port_valid`). Each was taken and ignored: a rate
/// limit asked for was silently not applied.
fn modify_qp_mask_ok(a: &ibv_qp_attr, mask: c_uint) -> Result<(), c_int> {
    if mask & !((IBV_QP_DEST_QPN << 1) - 1) != 0 {
        return Err(EOPNOTSUPP);
    }
    let has = |bit: c_uint| mask & bit != 0;
    if (has(IBV_QP_PORT) && a.port_num != 1)
        || (has(IBV_QP_AV) && a.ah_attr.port_num != 1)
        || (has(IBV_QP_ALT_PATH) && (a.alt_port_num != 1 || a.alt_ah_attr.port_num != 1))
        || (has(IBV_QP_CUR_STATE) && a.cur_qp_state > IBV_QPS_ERR)
        || (has(IBV_QP_STATE) && a.qp_state > IBV_QPS_ERR)
    {
        return Err(EINVAL);
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn __wc_ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard(EIO, || {
        // SAFETY: qp is ours; attr and init the caller's.
        let Some(q) = (unsafe { qp_ref(qp) }) else {
            return EINVAL;
        };
        let state = match q.qp.state() {
            // Not connected yet: the state the application (or rdma_cm) last moved it to
            // (RESET when new, INIT after rdma_create_qp, ...), which the engine does not
            // tell apart.
            wv::QpState::Idle => match qp_state_field(qp) {
                s @ (IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR | IBV_QPS_RTS) => s,
                _ => IBV_QPS_INIT,
            },
            wv::QpState::Connecting => IBV_QPS_RTR,
            wv::QpState::Rts => IBV_QPS_RTS,
            // Closing after `rdma_destroy_id` ([`close_on_destroy_id`] set ERR, as the
            // kernel's QP is in ERROR at once): ERR, not SQD.
            wv::QpState::Closing if qp_state_field(qp) == IBV_QPS_ERR => IBV_QPS_ERR,
            wv::QpState::Closing => IBV_QPS_SQD,
            wv::QpState::Terminate | wv::QpState::Error => IBV_QPS_ERR,
        };
        // SAFETY: attr is the caller's.
        if let Some(a) = unsafe { attr.as_mut() } {
            *a = Default::default();
            a.qp_state = state;
            a.cur_qp_state = state;
            a.cap = q.cap;
            a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
            a.port_num = 1;
            // As siw reports them (siw_query_qp): the path MTU is the port's, and the
            // Reads and atomics in flight each way are the connection's negotiated ORD
            // (ours outstanding, max_rd_atomic) and IRD (the peer's we serve,
            // max_dest_rd_atomic), 0 before it is established. They read 0 always.
            let io = q.ird_ord.load(Ordering::Acquire);
            a.max_dest_rd_atomic = (io >> 16).min(255) as u8;
            a.max_rd_atomic = (io & 0xFFFF).min(255) as u8;
            a.path_mtu = engine()
                .ok()
                .and_then(|e| e.ctx.query_port(1).ok())
                .map_or(IBV_MTU_1024, |p| ib_mtu(p.active_mtu));
            // rdma-core's ibv_query_qp: asked for the state, qp->state takes it (verbs.c).
            if mask as c_uint & IBV_QP_STATE != 0 {
                set_qp_state(qp, state);
            }
        }
        // SAFETY: init is the caller's.
        if let Some(i) = unsafe { init.as_mut() } {
            *i = Default::default();
            let b = q.ibv_ptr();
            // SAFETY: the QP's own struct, a field at a time (see `Qp::ibv`).
            unsafe {
                i.qp_context = (*b).qp_context;
                i.send_cq = (*b).send_cq;
                i.recv_cq = (*b).recv_cq;
                i.srq = (*b).srq;
            }
            i.cap = q.cap;
            i.qp_type = IBV_QPT_RC;
            i.sq_sig_all = c_int::from(q.sig_all);
        }
        0
    })
}

/// Whether `w`'s gather list holds no octets: no SGE, or at most [`wv::MAX_SGE`] SGEs
/// (more is refused by the post) each of length 0.
fn no_octets(w: &ibv_send_wr) -> bool {
    if w.num_sge == 0 {
        return true;
    }
    if w.num_sge < 0 || w.num_sge as usize > wv::MAX_SGE || w.sg_list.is_null() {
        return false;
    }
    // SAFETY: sg_list holds num_sge entries (ibv_post_send(3)), at most MAX_SGE here.
    let sg = unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) };
    sg.iter().all(|s| s.length == 0)
}

/// One `ibv_send_wr` as a Warpcore send operation.
pub(crate) fn send_op(w: &ibv_send_wr) -> Result<SendOp, c_int> {
    let solicited = w.send_flags & IBV_SEND_SOLICITED != 0;
    // SAFETY: reading the union member the opcode selects (ibv_post_send(3)).
    let op = unsafe {
        match w.opcode {
            IBV_WR_SEND if solicited => SendOp::SendSe,
            IBV_WR_SEND => SendOp::Send,
            IBV_WR_SEND_WITH_INV if solicited => SendOp::SendSeInvalidate {
                stag: w.__bindgen_anon_1.invalidate_rkey,
            },
            IBV_WR_SEND_WITH_INV => SendOp::SendInvalidate {
                stag: w.__bindgen_anon_1.invalidate_rkey,
            },
            IBV_WR_RDMA_WRITE => SendOp::Write {
                remote_stag: w.wr.rdma.rkey,
                remote_to: w.wr.rdma.remote_addr,
            },
            IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm {
                remote_stag: w.wr.rdma.rkey,
                remote_to: w.wr.rdma.remote_addr,
                imm: u64::from(u32::from_be(w.__bindgen_anon_1.imm_data)),
                solicited,
            },
            // RFC 7306's Immediate Data message carries no payload: a Send with Immediate
            // of zero octets maps onto it (no SGE, or SGEs of no octets: the message is
            // the gather list's octets, ibv_post_send(3)); with payload there is no iWARP
            // equivalent.
            IBV_WR_SEND_WITH_IMM if no_octets(w) => SendOp::Immediate {
                imm: u64::from(u32::from_be(w.__bindgen_anon_1.imm_data)),
                solicited,
            },
            IBV_WR_SEND_WITH_IMM => return Err(EOPNOTSUPP),
            IBV_WR_RDMA_READ => SendOp::Read {
                remote_stag: w.wr.rdma.rkey,
                remote_to: w.wr.rdma.remote_addr,
            },
            IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::AtomicFetchAdd {
                remote_stag: w.wr.atomic.rkey,
                remote_to: w.wr.atomic.remote_addr,
                add: w.wr.atomic.compare_add,
                add_mask: 0,
            },
            IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCmpSwap {
                remote_stag: w.wr.atomic.rkey,
                remote_to: w.wr.atomic.remote_addr,
                compare: w.wr.atomic.compare_add,
                compare_mask: u64::MAX,
                swap: w.wr.atomic.swap,
                swap_mask: u64::MAX,
            },
            // Opcodes of verbs.h that an iWARP RC QP does not carry here (TSO, the
            // driver's, ATOMIC_WRITE; LOCAL_INV and BIND_MW are taken before this, by
            // `post_one`): not supported.
            IBV_WR_TSO | IBV_WR_DRIVER1 | IBV_WR_ATOMIC_WRITE | IBV_WR_LOCAL_INV
            | IBV_WR_BIND_MW => return Err(EOPNOTSUPP),
            // A value verbs.h does not define: EINVAL, as mlx5 and siw answer one.
            _ => return Err(EINVAL),
        }
    };
    Ok(op)
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard(EIO, || {
        // SAFETY: qp is ours.
        let Some(q) = (unsafe { qp_ref(qp) }) else {
            return EINVAL;
        };
        while !wr.is_null() {
            // SAFETY: the caller's list (ibv_post_send(3)).
            let w = unsafe { &*wr };
            let r = match post_one(q, w) {
                // Completed flushed by the engine core, behind the requests posted before
                // it (some may still be draining or on their way to the core).
                Err(Posted::Engine(e)) if flushes(&e) => {
                    q.qp.post_send_flushed(w.wr_id).map_err(|e| errno_of(&e))
                }
                Err(Posted::Engine(e)) => Err(errno_of(&e)),
                Err(Posted::Errno(e)) => Err(e),
                Ok(()) => Ok(()),
            };
            if let Err(e) = r {
                if !bad.is_null() {
                    // SAFETY: bad is the caller's out-pointer.
                    unsafe { *bad = wr };
                }
                return e;
            }
            wr = w.next;
        }
        0
    })
}

/// Why a send work request was not posted.
enum Posted {
    Errno(c_int),
    Engine(wv::Error),
}

impl From<c_int> for Posted {
    fn from(e: c_int) -> Posted {
        Posted::Errno(e)
    }
}

impl From<wv::Error> for Posted {
    fn from(e: wv::Error) -> Posted {
        Posted::Engine(e)
    }
}

fn post_one(q: &Qp, w: &ibv_send_wr) -> Result<(), Posted> {
    let fenced = w.send_flags & IBV_SEND_FENCE != 0;
    if w.opcode == IBV_WR_BIND_MW {
        // SAFETY: the union member of IBV_WR_BIND_MW.
        let b = unsafe { w.__bindgen_anon_2.bind_mw };
        // SAFETY: the window is ours. Its rkey read atomically ([`Mw::rkey`]), not
        // through a `&ibv_mw` another thread's bind of it may be storing into.
        let cur = unsafe { b.mw.cast::<Mw>().as_ref() }
            .map(Mw::rkey)
            .ok_or(Posted::Errno(EINVAL))?;
        // The new rkey is the application's choice in the verbs (ibv_inc_rkey from the
        // rkey it holds): its key octet is taken as it is, its index must be the window's.
        // (It had to be the window's rkey plus one, and the engine took the key after the
        // last bind posted: an application that kept mw->rkey back after a bind that
        // failed when it ran, as ibv_bind_mw(3) tells it to, had its next bind accepted
        // under one key and bound under the next, and advertised a key the window never
        // had.)
        if b.rkey & !0xFF != cur & !0xFF {
            return Err(EINVAL.into());
        }
        return post_bind(
            q,
            w.wr_id,
            b.mw,
            &b.bind_info,
            w.send_flags,
            Some(b.rkey as u8),
        )
        .map(|_| ());
    }
    if w.opcode == IBV_WR_LOCAL_INV {
        // SAFETY: the union member of IBV_WR_LOCAL_INV.
        let stag = unsafe { w.__bindgen_anon_1.invalidate_rkey };
        return q
            .qp
            .post_local_invalidate_with(
                w.wr_id,
                stag,
                q.sig_all || w.send_flags & IBV_SEND_SIGNALED != 0,
                fenced,
            )
            .map_err(Posted::from);
    }
    let op = send_op(w).map_err(Posted::from)?;
    // An RDMA Read scatters into at most max_sge_rd SGEs (ibv_query_device(3)), whatever
    // the queue's max_send_sge; refused here, as the queue's own limit is, so that a QP in
    // the error state refuses it too instead of completing it flushed.
    let max_sge = if matches!(op, SendOp::Read { .. }) {
        MAX_SGE_RD.min(q.cap.max_send_sge)
    } else {
        q.cap.max_send_sge
    };
    // SAFETY: sg_list holds num_sge entries.
    let sg = unsafe { sges(w.sg_list, w.num_sge, max_sge) }.map_err(Posted::from)?;
    let signaled = q.sig_all || w.send_flags & IBV_SEND_SIGNALED != 0;
    // ibv_post_send(3): IBV_SEND_INLINE is "Valid only for Send and RDMA Write": a Read's
    // or an atomic's SGE is where the answer lands, no payload to copy. The flag is passed
    // over for them, as rxe passes it over (an atomic with it was EINVAL, the engine's
    // InvalidInline).
    let inline = w.send_flags & IBV_SEND_INLINE != 0
        && !matches!(op, SendOp::Read { .. })
        && !op.is_atomic();
    let total: usize = sg.iter().map(|s| s.length as usize).sum();
    // An inline post of nothing needs no inline room (as on any provider; the engine's
    // inline path wants room for at least one octet): posted without SGEs, whose keys an
    // inline post does not check. An Immediate Data message carries none either (its SGEs,
    // if any, are of no octets: `send_op`).
    let sg = if (inline && total == 0) || matches!(op, SendOp::Immediate { .. }) {
        &[][..]
    } else {
        sg
    };
    if inline && total > 0 {
        if total > q.max_inline as usize {
            return Err(EINVAL.into());
        }
        let mut data = Vec::with_capacity(total);
        // An SGE of no octets is nothing to copy, whatever its addr (NULL included, which
        // a slice may not be made from): the providers' memcpy of 0 octets touches nothing.
        for s in sg.iter().filter(|s| s.length != 0) {
            // SAFETY: inline data is read from the caller's buffers at post time
            // (IBV_SEND_INLINE: addr/length name readable memory, lkey unused).
            data.extend_from_slice(unsafe {
                std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
            });
        }
        return q
            .qp
            .post_send_inline_with(w.wr_id, op, &data, signaled, fenced)
            .map_err(Posted::from);
    }
    let (v, n) = to_sges(sg);
    let mut s = wv::SendWr::new(w.wr_id, op, &v[..n]).map_err(Posted::from)?;
    if fenced {
        s = s.fenced();
    }
    if !signaled {
        s = s.unsignaled();
    }
    q.qp.post_send(&s).map_err(Posted::from)
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(EIO, || {
        // SAFETY: qp is ours.
        let Some(q) = (unsafe { qp_ref(qp) }) else {
            return EINVAL;
        };
        if q.srq || q.cap.max_recv_wr == 0 {
            // ibv_post_recv(3) on a QP with an SRQ, or made without a receive queue
            // (max_recv_wr 0; the engine's QP has one entry all the same): the first
            // request is the bad one, as siw's post_recv reports both
            // (`qp->srq || qp->attrs.rq_size == 0`) and rxe's the first.
            if !bad.is_null() {
                // SAFETY: bad is the caller's out-pointer.
                unsafe { *bad = wr };
            }
            return EINVAL;
        }
        post_recv_list(
            wr,
            bad,
            q.cap.max_recv_sge,
            |r| q.qp.post_recv(r),
            |r| q.qp.post_recv_late(r),
        )
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // QPs are not created with the extended work request interface.
    null_mut()
}

// ---------------------------------------------------------------- not supported

#[no_mangle]
pub extern "C" fn __wc_ibv_create_ah(_pd: *mut ibv_pd, _attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    set_errno(EOPNOTSUPP); // address handles are for UD, which iWARP has not
    null_mut()
}

#[no_mangle]
pub extern "C" fn __wc_ibv_create_ah_from_wc(
    _pd: *mut ibv_pd,
    _wc: *mut ibv_wc,
    _grh: *mut ibv_grh,
    _port: u8,
) -> *mut ibv_ah {
    set_errno(EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub extern "C" fn __wc_ibv_destroy_ah(_ah: *mut ibv_ah) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn __wc_ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn __wc_ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn __wc_ibv_import_device(_fd: c_int) -> *mut ibv_context {
    set_errno(EOPNOTSUPP); // no kernel uverbs file to import
    null_mut()
}

#[no_mangle]
pub extern "C" fn __wc_ibv_import_pd(_c: *mut ibv_context, _h: u32) -> *mut ibv_pd {
    set_errno(EOPNOTSUPP);
    null_mut()
}

#[no_mangle]
pub extern "C" fn __wc_ibv_unimport_pd(_pd: *mut ibv_pd) {}

#[no_mangle]
pub extern "C" fn __wc_ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    guard(IBV_REREG_MR_ERR_CMD, || {
        // ibv_rereg_mr(3): "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was
        // detected by libibverbs". rdma-core's verbs.c makes these checks before it asks the
        // provider, with errno EINVAL: flags outside IBV_REREG_MR_FLAGS_SUPPORTED, a new
        // translation without an address or a length, access flags without
        // IBV_REREG_MR_CHANGE_ACCESS (and a NULL mr, which verbs.c would dereference). Answered
        // IBV_REREG_MR_ERR_CMD ("MR shouldn't be used"), an application that checks the code
        // deregistered an MR it could have kept.
        let f = flags as c_uint;
        if mr.is_null()
            || f & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (f & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (len == 0 || addr.is_null()))
            || (access != 0 && f & IBV_REREG_MR_CHANGE_ACCESS == 0)
        {
            set_errno(EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        // The rest: what rdma-core answers for a provider without rereg_mr, as siw is
        // (dummy_ops.c: EOPNOTSUPP, turned into IBV_REREG_MR_ERR_CMD by verbs.c). A positive
        // errno read as success by `< 0`.
        set_errno(EOPNOTSUPP);
        IBV_REREG_MR_ERR_CMD
    })
}

#[no_mangle]
pub extern "C" fn __wc_ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _off: u64,
    _len: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    null_mut()
}

// ---------------------------------------------------------------- strings

macro_rules! cstr_table {
    ($v:expr, $($k:ident => $s:literal),* $(,)?) => {
        match $v {
            $($k => concat!($s, "\0").as_ptr().cast(),)*
            _ => "unknown\0".as_ptr().cast(),
        }
    };
}

#[no_mangle]
pub extern "C" fn __wc_ibv_wc_status_str(s: ibv_wc_status) -> *const c_char {
    cstr_table!(s,
        IBV_WC_SUCCESS => "success",
        IBV_WC_LOC_LEN_ERR => "local length error",
        IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
        IBV_WC_LOC_EEC_OP_ERR => "local EE context operation error",
        IBV_WC_LOC_PROT_ERR => "local protection error",
        IBV_WC_WR_FLUSH_ERR => "Work Request Flushed Error",
        IBV_WC_MW_BIND_ERR => "memory management operation error",
        IBV_WC_BAD_RESP_ERR => "bad response error",
        IBV_WC_LOC_ACCESS_ERR => "local access error",
        IBV_WC_REM_INV_REQ_ERR => "remote invalid request error",
        IBV_WC_REM_ACCESS_ERR => "remote access error",
        IBV_WC_REM_OP_ERR => "remote operation error",
        IBV_WC_RETRY_EXC_ERR => "transport retry counter exceeded",
        IBV_WC_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        IBV_WC_LOC_RDD_VIOL_ERR => "local RDD violation error",
        IBV_WC_REM_INV_RD_REQ_ERR => "remote invalid RD request",
        IBV_WC_REM_ABORT_ERR => "aborted error",
        IBV_WC_INV_EECN_ERR => "invalid EE context number",
        IBV_WC_INV_EEC_STATE_ERR => "invalid EE context state",
        IBV_WC_FATAL_ERR => "fatal error",
        IBV_WC_RESP_TIMEOUT_ERR => "response timeout error",
        IBV_WC_GENERAL_ERR => "general error",
        IBV_WC_TM_ERR => "TM error",
        IBV_WC_TM_RNDV_INCOMPLETE => "TM software rendezvous",
    )
}

#[no_mangle]
pub extern "C" fn __wc_ibv_port_state_str(s: ibv_port_state) -> *const c_char {
    cstr_table!(s,
        IBV_PORT_NOP => "no state change (NOP)",
        IBV_PORT_DOWN => "down",
        IBV_PORT_INIT => "init",
        IBV_PORT_ARMED => "armed",
        IBV_PORT_ACTIVE => "active",
        IBV_PORT_ACTIVE_DEFER => "active defer",
    )
}

#[no_mangle]
pub extern "C" fn __wc_ibv_node_type_str(t: ibv_node_type) -> *const c_char {
    cstr_table!(t,
        IBV_NODE_CA => "InfiniBand channel adapter",
        IBV_NODE_SWITCH => "InfiniBand switch",
        IBV_NODE_ROUTER => "InfiniBand router",
        IBV_NODE_RNIC => "iWARP NIC",
        IBV_NODE_USNIC => "usNIC",
        IBV_NODE_USNIC_UDP => "usNIC UDP",
        IBV_NODE_UNSPECIFIED => "unspecified",
    )
}

#[no_mangle]
pub extern "C" fn __wc_ibv_event_type_str(t: ibv_event_type) -> *const c_char {
    cstr_table!(t,
        IBV_EVENT_CQ_ERR => "CQ error",
        IBV_EVENT_QP_FATAL => "local work queue catastrophic error",
        IBV_EVENT_QP_REQ_ERR => "invalid request local work queue error",
        IBV_EVENT_QP_ACCESS_ERR => "local access violation work queue error",
        IBV_EVENT_COMM_EST => "communication established",
        IBV_EVENT_SQ_DRAINED => "send queue drained",
        IBV_EVENT_PATH_MIG => "path migrated",
        IBV_EVENT_PATH_MIG_ERR => "path migration request error",
        IBV_EVENT_DEVICE_FATAL => "local catastrophic error",
        IBV_EVENT_PORT_ACTIVE => "port active",
        IBV_EVENT_PORT_ERR => "port error",
        IBV_EVENT_LID_CHANGE => "LID change",
        IBV_EVENT_PKEY_CHANGE => "P_Key change",
        IBV_EVENT_SM_CHANGE => "SM change",
        IBV_EVENT_SRQ_ERR => "SRQ catastrophic error",
        IBV_EVENT_SRQ_LIMIT_REACHED => "SRQ limit reached",
        IBV_EVENT_QP_LAST_WQE_REACHED => "last WQE reached",
        IBV_EVENT_CLIENT_REREGISTER => "client reregistration",
        IBV_EVENT_GID_CHANGE => "GID table change",
        IBV_EVENT_WQ_FATAL => "WQ fatal",
    )
}

// ---------------------------------------------------------------- rates, ECE, imports, fork
//
// The functions below are rdma-core's own where they need no provider (the rate tables of
// libibverbs/verbs.c), or what rdma-core's libibverbs answers for a provider without the
// operation (libibverbs/dummy_ops.c, which fills every op a provider leaves out), as siw's
// context does: the same return value and errno, so a program sees what it would see on
// siw. Values from rdma-core 44 (Debian's libibverbs1 44.0, which these libraries replace).

/// The IB rates' multiples of 2.5 Gb/s (rdma-core `libibverbs/verbs.c`,
/// `ibv_rate_to_mult`/`mult_to_ibv_rate`): the rates that are such a multiple only.
const RATE_MULT: [(ibv_rate, c_int); 15] = [
    (IBV_RATE_2_5_GBPS, 1),
    (IBV_RATE_5_GBPS, 2),
    (IBV_RATE_10_GBPS, 4),
    (IBV_RATE_20_GBPS, 8),
    (IBV_RATE_30_GBPS, 12),
    (IBV_RATE_40_GBPS, 16),
    (IBV_RATE_60_GBPS, 24),
    (IBV_RATE_80_GBPS, 32),
    (IBV_RATE_120_GBPS, 48),
    (IBV_RATE_28_GBPS, 11),
    (IBV_RATE_50_GBPS, 20),
    (IBV_RATE_400_GBPS, 160),
    (IBV_RATE_600_GBPS, 240),
    (IBV_RATE_800_GBPS, 320),
    (IBV_RATE_1200_GBPS, 480),
];

/// The IB rates in Mb/s (rdma-core `libibverbs/verbs.c`, `ibv_rate_to_mbps`/
/// `mbps_to_ibv_rate`): the link's data rate after its encoding, so IBV_RATE_100_GBPS
/// (4x EDR, 64b/66b) is 103,125, not 100,000.
const RATE_MBPS: [(ibv_rate, c_int); 23] = [
    (IBV_RATE_2_5_GBPS, 2500),
    (IBV_RATE_5_GBPS, 5000),
    (IBV_RATE_10_GBPS, 10000),
    (IBV_RATE_20_GBPS, 20000),
    (IBV_RATE_30_GBPS, 30000),
    (IBV_RATE_40_GBPS, 40000),
    (IBV_RATE_60_GBPS, 60000),
    (IBV_RATE_80_GBPS, 80000),
    (IBV_RATE_120_GBPS, 120000),
    (IBV_RATE_14_GBPS, 14062),
    (IBV_RATE_56_GBPS, 56250),
    (IBV_RATE_112_GBPS, 112500),
    (IBV_RATE_168_GBPS, 168750),
    (IBV_RATE_25_GBPS, 25781),
    (IBV_RATE_100_GBPS, 103125),
    (IBV_RATE_200_GBPS, 206250),
    (IBV_RATE_300_GBPS, 309375),
    (IBV_RATE_28_GBPS, 28125),
    (IBV_RATE_50_GBPS, 53125),
    (IBV_RATE_400_GBPS, 425000),
    (IBV_RATE_600_GBPS, 637500),
    (IBV_RATE_800_GBPS, 850000),
    (IBV_RATE_1200_GBPS, 1275000),
];

/// The right of `table`'s pair whose left is `a`.
fn right_of<A: PartialEq + Copy, B: Copy>(table: &[(A, B)], a: A) -> Option<B> {
    table.iter().find(|(l, _)| *l == a).map(|&(_, r)| r)
}

/// The left of `table`'s pair whose right is `b`.
fn left_of<A: Copy, B: PartialEq + Copy>(table: &[(A, B)], b: B) -> Option<A> {
    table.iter().find(|(_, r)| *r == b).map(|&(l, _)| l)
}

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, -1 for any other value.
#[no_mangle]
pub extern "C" fn __wc_ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    right_of(&RATE_MULT, rate).unwrap_or(-1)
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, `IBV_RATE_MAX` for any other.
#[no_mangle]
pub extern "C" fn __wc_mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    left_of(&RATE_MULT, mult).unwrap_or(IBV_RATE_MAX)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, -1 for any other value.
#[no_mangle]
pub extern "C" fn __wc_ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    right_of(&RATE_MBPS, rate).unwrap_or(-1)
}

/// `mbps_to_ibv_rate`: the rate of exactly that many Mb/s, `IBV_RATE_MAX` for any other.
#[no_mangle]
pub extern "C" fn __wc_mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    left_of(&RATE_MBPS, mbps).unwrap_or(IBV_RATE_MAX)
}

/// `ibv_set_ece`: ECE (Enhanced Connection Establishment) is carried by InfiniBand CM
/// messages, which iWARP has none of (docs/rdma-compat.md, `rdma_set_local_ece`).
/// rdma-core's verbs.c refuses a `vendor_id` of 0 itself (errno and return value
/// `EOPNOTSUPP`) and otherwise returns the provider's answer, `EOPNOTSUPP` from
/// dummy_ops.c's `set_ece` for siw and any provider without it (errno untouched).
#[no_mangle]
pub extern "C" fn __wc_ibv_set_ece(_qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    guard(EIO, || {
        // SAFETY: ece is the caller's (rdma-core reads it unchecked as well).
        if unsafe { ece.as_ref() }.is_none_or(|e| e.vendor_id == 0) {
            set_errno(EOPNOTSUPP);
        }
        EOPNOTSUPP
    })
}

/// `ibv_query_ece`: dummy_ops.c's `query_ece`, `EOPNOTSUPP` (errno untouched).
#[no_mangle]
pub extern "C" fn __wc_ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    EOPNOTSUPP
}

/// `ibv_import_mr`: a memory region of another process's context shared through the
/// kernel's uverbs file, which Warpcore's context has none of (as `ibv_import_device` and
/// `ibv_import_pd`): dummy_ops.c's `import_mr`, NULL with errno `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn __wc_ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_unimport_mr`: dummy_ops.c's `unimport_mr` does nothing (no region was imported).
#[no_mangle]
pub extern "C" fn __wc_ibv_unimport_mr(_mr: *mut ibv_mr) {}

/// `ibv_import_dm`: device memory, which Warpcore has none of: dummy_ops.c's `import_dm`,
/// NULL with errno `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn __wc_ibv_import_dm(_c: *mut ibv_context, _handle: u32) -> *mut ibv_dm {
    set_errno(EOPNOTSUPP);
    null_mut()
}

/// `ibv_unimport_dm`: dummy_ops.c's `unimport_dm` does nothing.
#[no_mangle]
pub extern "C" fn __wc_ibv_unimport_dm(_dm: *mut ibv_dm) {}

/// `ibv_query_qp_data_in_order`: 1 only where the provider guarantees that the data of
/// an operation is written in order; dummy_ops.c's `query_qp_data_in_order` (siw's and
/// every provider's but mlx5's) answers 0, "not guaranteed", and so do we: a Write's
/// segments are placed as they arrive (DDP places out of order, RFC 5041 section 5).
#[no_mangle]
pub extern "C" fn __wc_ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: ibv_wr_opcode,
    _flags: u32,
) -> c_int {
    0
}

/// `ibv_dontfork_range`: rdma-core's memory.c advises `MADV_DONTFORK` only once
/// `ibv_fork_init` built its range tree, which it does not when fork needs no help
/// (`ibv_is_fork_initialized` `IBV_FORK_UNNEEDED`, as ours always answers: Warpcore pins
/// nothing); without the tree it returns 0 and changes nothing.
#[no_mangle]
pub extern "C" fn __wc_ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: as [`__wc_ibv_dontfork_range`], 0 and nothing changed.
#[no_mangle]
pub extern "C" fn __wc_ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `_ibv_query_gid_table` (verbs.h's `ibv_query_gid_table`): every valid GID of every
/// port, as `ibv_query_gid_ex` reports each, into `entries` (`entry_size` apart); the
/// number of entries, or a negative errno (rdma-core `libibverbs/cmd_device.c`: `flags`
/// other than 0 `-EOPNOTSUPP`, more valid GIDs than `max_entries` `-EINVAL`). Warpcore's
/// one port has one GID, its MAC address followed by zeroes (`__wc_ibv_query_gid`).
#[no_mangle]
pub extern "C" fn __wc__ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(EIO as isize), || {
        if flags != 0 {
            return -(EOPNOTSUPP as isize);
        }
        if !check_ctx(c) || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return -(EINVAL as isize);
        }
        let mut e: ibv_gid_entry = Default::default();
        let r = __wc__ibv_query_gid_ex(c, 1, 0, &mut e, 0, entry_size);
        if r != 0 {
            return -(r as isize);
        }
        if max_entries < 1 || entries.is_null() {
            return -(EINVAL as isize);
        }
        // SAFETY: entries holds max_entries (at least one) entries of entry_size octets,
        // each at least an ibv_gid_entry (checked).
        unsafe { entries.write_unaligned(e) };
        1
    })
}
