//! Unit tests of what needs no engine: the exported names and versions against Debian's
//! libraries, the translations between the verbs' structs and Warpcore's, the event
//! channel and the asynchronous event queue, address information, and the errors of bad
//! arguments. The end-to-end tests
//! (Debian's own programs between two processes) are in `scripts/test-rdma-compat.sh`.

use std::ffi::{c_int, CStr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{null, null_mut};

use warpcore_verbs::{Access, SendOp};

use crate::sys::*;
use crate::{cm, export, verbs};

fn objdump_defaults(lib: &str) -> Vec<(String, String)> {
    let out = std::process::Command::new("objdump")
        .args(["-T", lib])
        .output()
        .expect("objdump (binutils) is needed by this test");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[1] == "g" && f[2] == "DF" && !f[f.len() - 2].starts_with('('))
                .then(|| (f[f.len() - 1].to_string(), f[f.len() - 2].to_string()))
        })
        .collect()
}

/// Every name we export exists in Debian's libibverbs.so.1 with the same default version:
/// a program linked against it binds to ours.
#[test]
fn exported_names_have_the_system_librarys_versions() {
    let sys = objdump_defaults("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    assert!(
        sys.len() > 50,
        "objdump read too little of the system library"
    );
    for (name, ver) in export::SYMBOLS {
        assert!(
            sys.iter().any(|(n, v)| n == name && v == ver),
            "{name}@@{ver} is not what the system's libibverbs exports"
        );
    }
    // And librdmacm's table, for the forwarding library.
    let sys = objdump_defaults("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    let table = include_str!("../rdmacm/rdmacm.symbols");
    let mut n = 0;
    for l in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut f = l.split_whitespace();
        let (name, ver) = (f.next().unwrap(), f.next().unwrap());
        assert!(
            sys.iter().any(|(a, b)| a == name && b == ver),
            "{name}@@{ver} is not what the system's librdmacm exports"
        );
        n += 1;
    }
    assert!(n >= 30);
}

#[test]
fn access_flags_translate_and_bad_ones_are_refused() {
    let all = (IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND) as c_int;
    let a = verbs::access_of(all).unwrap();
    for x in [
        Access::LOCAL_WRITE,
        Access::REMOTE_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_ATOMIC,
        Access::MW_BIND,
    ] {
        assert!(a.contains(x));
    }
    assert_eq!(verbs::access_of(0).unwrap(), Access::empty());
    // ibv_reg_mr(3): remote write without local write is EINVAL.
    assert_eq!(
        verbs::access_of(IBV_ACCESS_REMOTE_WRITE as c_int),
        Err(crate::EINVAL)
    );
    // On-demand paging and zero-based regions are not supported.
    assert_eq!(
        verbs::access_of(IBV_ACCESS_ON_DEMAND as c_int),
        Err(crate::EOPNOTSUPP)
    );
    assert_eq!(
        verbs::access_of(IBV_ACCESS_ZERO_BASED as c_int),
        Err(crate::EOPNOTSUPP)
    );
    // The optional flags (bits 20 to 29: relaxed ordering and those to come) are hints,
    // ignored as rdma-core and the kernel ignore them where unsupported; bit 30 is not one.
    for bit in 20..=29 {
        assert_eq!(
            verbs::access_of(IBV_ACCESS_LOCAL_WRITE as c_int | 1 << bit),
            Ok(Access::LOCAL_WRITE),
            "optional bit {bit}"
        );
    }
    assert_eq!(
        verbs::access_of(IBV_ACCESS_RELAXED_ORDERING as c_int),
        Ok(Access::empty())
    );
    assert_eq!(verbs::access_of(1 << 30), Err(crate::EINVAL));
}

/// The kernel's `ib_check_mr_access` (include/rdma/ib_verbs.h), which rdma-core's
/// `ibv_reg_mr` hands the flags to on siw: a bit outside `IB_ACCESS_SUPPORTED` (none of
/// rdma-core 44's `IBV_ACCESS_*`, not in the optional range) is `EINVAL`, checked after
/// remote write or atomic without local write (`EINVAL` too) and before the flags the
/// device does not support (on-demand paging: `EOPNOTSUPP`). Every unknown bit was
/// `EOPNOTSUPP`.
#[test]
fn unknown_access_bits_are_einval() {
    let lw = IBV_ACCESS_LOCAL_WRITE as c_int;
    for bit in (8..20).chain([30, 31]) {
        assert_eq!(
            verbs::access_of(lw | 1 << bit),
            Err(crate::EINVAL),
            "bit {bit}"
        );
    }
    // An unknown bit beside a flag the device lacks: the unknown bit decides.
    assert_eq!(
        verbs::access_of(lw | IBV_ACCESS_ON_DEMAND as c_int | 1 << 12),
        Err(crate::EINVAL)
    );
    assert_eq!(
        verbs::access_of(IBV_ACCESS_REMOTE_WRITE as c_int | IBV_ACCESS_ZERO_BASED as c_int),
        Err(crate::EINVAL)
    );
    // Known flags this device does not support stay EOPNOTSUPP.
    assert_eq!(
        verbs::access_of(lw | IBV_ACCESS_ON_DEMAND as c_int),
        Err(crate::EOPNOTSUPP)
    );
}

/// ibv_reg_mr(3)'s `IBV_ACCESS_HUGETLB` is a hint: the kernel's `ib_check_mr_access`
/// accepts it (`IB_ACCESS_SUPPORTED`) and siw ignores it, so it registers; the other checks
/// still apply with it.
#[test]
fn hugetlb_access_is_a_hint() {
    assert_eq!(
        verbs::access_of((IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB) as c_int),
        Ok(Access::LOCAL_WRITE)
    );
    assert_eq!(
        verbs::access_of((IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_HUGETLB) as c_int),
        Err(crate::EINVAL)
    );
    assert_eq!(
        verbs::access_of((IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB) as c_int),
        Err(crate::EOPNOTSUPP)
    );
}

/// ibv_rereg_mr(3): "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was detected
/// by libibverbs" (rdma-core's verbs.c, errno EINVAL, before the provider is asked), not
/// IBV_REREG_MR_ERR_CMD ("MR shouldn't be used"), which is left for valid input to a
/// provider without rereg_mr (errno EOPNOTSUPP), as siw is.
#[test]
fn rereg_mr_input_errors_are_err_input() {
    let mut mr: ibv_mr = Default::default();
    let m: *mut ibv_mr = &mut mr;
    let mut buf = [0u8; 64];
    let addr = buf.as_mut_ptr().cast();
    let errno = || std::io::Error::last_os_error().raw_os_error();
    let translation = IBV_REREG_MR_CHANGE_TRANSLATION as c_int;
    for (what, mr, flags, addr, len, access) in [
        (
            "a NULL mr",
            null_mut(),
            IBV_REREG_MR_CHANGE_ACCESS as c_int,
            null_mut(),
            0,
            0,
        ),
        ("an unknown flag", m, 1 << 3, null_mut(), 0, 0),
        ("a negative flags", m, -1, null_mut(), 0, 0),
        ("a translation at NULL", m, translation, null_mut(), 64, 0),
        ("a translation of 0 octets", m, translation, addr, 0, 0),
        (
            "access without CHANGE_ACCESS",
            m,
            IBV_REREG_MR_CHANGE_PD as c_int,
            null_mut(),
            0,
            IBV_ACCESS_LOCAL_WRITE as c_int,
        ),
    ] {
        assert_eq!(
            verbs::__wc_ibv_rereg_mr(mr, flags, null_mut(), addr, len, access),
            IBV_REREG_MR_ERR_INPUT,
            "{what}"
        );
        assert_eq!(errno(), Some(crate::EINVAL), "{what}");
    }
    assert_eq!(
        verbs::__wc_ibv_rereg_mr(
            m,
            (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS) as c_int,
            null_mut(),
            addr,
            64,
            IBV_ACCESS_LOCAL_WRITE as c_int
        ),
        IBV_REREG_MR_ERR_CMD
    );
    assert_eq!(errno(), Some(crate::EOPNOTSUPP));
}

#[test]
fn send_work_requests_translate() {
    let mut w: ibv_send_wr = Default::default();
    w.opcode = IBV_WR_RDMA_WRITE;
    w.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: 0x1000,
        rkey: 0xAB,
    };
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::Write {
            remote_stag: 0xAB,
            remote_to: 0x1000
        })
    );
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.__bindgen_anon_1.imm_data = 0x1234_5678_u32.to_be();
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::WriteWithImm {
            remote_stag: 0xAB,
            remote_to: 0x1000,
            imm: 0x1234_5678,
            solicited: false
        })
    );
    // IBV_SEND_SOLICITED on a Write with Immediate: its Immediate Data message carries
    // the Solicited Event flag (0x9), as on a Send.
    w.send_flags = IBV_SEND_SOLICITED;
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::WriteWithImm {
            remote_stag: 0xAB,
            remote_to: 0x1000,
            imm: 0x1234_5678,
            solicited: true
        })
    );
    w.send_flags = 0;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SOLICITED;
    assert_eq!(verbs::send_op(&w), Ok(SendOp::SendSe));
    w.send_flags = 0;
    w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    w.wr.atomic = ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
        remote_addr: 0x2000,
        compare_add: 5,
        swap: 6,
        rkey: 0xCD,
    };
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::AtomicCmpSwap {
            remote_stag: 0xCD,
            remote_to: 0x2000,
            compare: 5,
            compare_mask: u64::MAX,
            swap: 6,
            swap_mask: u64::MAX
        })
    );
    // A Send with Immediate carrying payload has no iWARP equivalent.
    w.opcode = IBV_WR_SEND_WITH_IMM;
    w.num_sge = 1;
    assert_eq!(verbs::send_op(&w), Err(crate::EOPNOTSUPP));
    w.num_sge = 0;
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::Immediate {
            imm: 0x1234_5678,
            solicited: false
        })
    );
    // post_err_qp.c: SGEs of no octets are no payload either (the message is the
    // gather list's octets, ibv_post_send(3)); one octet is.
    let mut sg = [ibv_sge {
        addr: 0x1000,
        length: 0,
        lkey: 7,
    }; 2];
    w.sg_list = sg.as_mut_ptr();
    w.num_sge = 2;
    assert_eq!(
        verbs::send_op(&w),
        Ok(SendOp::Immediate {
            imm: 0x1234_5678,
            solicited: false
        })
    );
    sg[1].length = 1;
    w.sg_list = sg.as_mut_ptr();
    assert_eq!(verbs::send_op(&w), Err(crate::EOPNOTSUPP));
    w.sg_list = null_mut();
    w.num_sge = 0;
    // UD-only opcodes, and values verbs.h does not define (EINVAL, as mlx5 and siw).
    w.opcode = IBV_WR_TSO;
    assert_eq!(verbs::send_op(&w), Err(crate::EOPNOTSUPP));
    for bad in [12, 13, 14, 16, 0x7fff_ffff] {
        w.opcode = bad;
        assert_eq!(verbs::send_op(&w), Err(crate::EINVAL), "opcode {bad}");
    }
}

#[test]
fn completions_translate() {
    use warpcore_verbs::{Completion, QpId, WcOpcode, WcStatus};
    let c = Completion {
        wr_id: 9,
        qp: QpId {
            core: 1,
            index: 2,
            generation: 3,
        },
        opcode: WcOpcode::RecvImm,
        status: WcStatus::Success,
        byte_len: 0,
        solicited: false,
        invalidated: None,
        imm: Some(0xDEAD_BEEF),
        atomic_orig: None,
    };
    let w = verbs::wc_of(&c);
    assert_eq!(w.wr_id, 9);
    assert_eq!(w.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_eq!(w.status, IBV_WC_SUCCESS);
    assert_eq!(w.qp_num, c.qp.qpn());
    assert_ne!(w.wc_flags & IBV_WC_WITH_IMM, 0);
    // SAFETY: the union member the flag names.
    let imm = unsafe { w.__bindgen_anon_1.imm_data };
    assert_eq!(u32::from_be(imm), 0xDEAD_BEEF);
    let f = verbs::wc_of(&Completion {
        status: WcStatus::FlushErr,
        opcode: WcOpcode::Read,
        imm: None,
        invalidated: Some(0x77),
        ..c
    });
    assert_eq!(
        (f.status, f.opcode),
        (IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_READ)
    );
    assert_ne!(f.wc_flags & IBV_WC_WITH_INV, 0);
}

/// The event channel: readable exactly while an event waits; a non-blocking descriptor
/// gives EAGAIN; events come out in order and are freed by their acknowledgement.
#[test]
fn event_channel_descriptor_and_order() {
    let ch = cm::__wc_rdma_create_event_channel();
    assert!(!ch.is_null());
    // SAFETY: the channel just made.
    let fd = unsafe { (*ch).fd };
    let readable = || readable_now(fd);
    assert!(!readable());
    let mut id: *mut rdma_cm_id = null_mut();
    assert_eq!(
        cm::__wc_rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP),
        0
    );
    cm::post_test_event(id, RDMA_CM_EVENT_ADDR_RESOLVED);
    cm::post_test_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
    assert!(readable());
    let mut ev: *mut rdma_cm_event = null_mut();
    assert_eq!(cm::__wc_rdma_get_cm_event(ch, &mut ev), 0);
    // SAFETY: the event just taken.
    let (kind, of) = unsafe { ((*ev).event, (*ev).id) };
    assert_eq!((kind, of), (RDMA_CM_EVENT_ADDR_RESOLVED, id));
    assert_eq!(cm::__wc_rdma_ack_cm_event(ev), 0);
    assert!(readable());
    assert_eq!(cm::__wc_rdma_get_cm_event(ch, &mut ev), 0);
    // SAFETY: as above.
    assert_eq!(unsafe { (*ev).event }, RDMA_CM_EVENT_ROUTE_RESOLVED);
    assert_eq!(cm::__wc_rdma_ack_cm_event(ev), 0);
    assert!(!readable());
    // Non-blocking: EAGAIN, not a hang.
    // SAFETY: our own descriptor.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    set_nonblocking(b.as_raw_fd());
    assert_eq!(cm::__wc_rdma_get_cm_event(ch, &mut ev), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EAGAIN)
    );
    // A port space other than TCP is refused with EOPNOTSUPP.
    let mut ud: *mut rdma_cm_id = null_mut();
    assert_eq!(
        cm::__wc_rdma_create_id(ch, &mut ud, null_mut(), RDMA_PS_UDP),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EOPNOTSUPP)
    );
    assert_eq!(cm::__wc_rdma_destroy_id(id), 0);
    cm::__wc_rdma_destroy_event_channel(ch);
    // SAFETY: a static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(cm::__wc_rdma_event_str(RDMA_CM_EVENT_ESTABLISHED)) };
    assert_eq!(s.to_str().unwrap(), "RDMA_CM_EVENT_ESTABLISHED");
}

/// Thousands of events queued before the application reads any (ucmatose and cmtime start
/// every resolution first): queuing never waits for the reader, the descriptor stays
/// readable until the last is taken, and then reads EAGAIN (non-blocking). One token per
/// event blocked the poster after a few hundred (a socket's buffer of one-octet writes).
#[test]
fn event_channel_queues_thousands_unread() {
    const N: usize = 5000;
    let ch = cm::__wc_rdma_create_event_channel();
    assert!(!ch.is_null());
    // SAFETY: the channel just made.
    let fd = unsafe { (*ch).fd };
    let mut id: *mut rdma_cm_id = null_mut();
    assert_eq!(
        cm::__wc_rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP),
        0
    );
    // The posts on another thread, so that a post that waits fails the test, not hang it.
    let idp = id as usize;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..N {
            cm::post_test_event(idp as *mut rdma_cm_id, RDMA_CM_EVENT_ADDR_RESOLVED);
        }
        let _ = done_tx.send(());
    });
    assert!(
        done_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_ok(),
        "queuing {N} events unread did not finish in 20 s"
    );
    set_nonblocking(fd);
    let readable = || readable_now(fd);
    for i in 0..N {
        assert!(readable(), "not readable with {} events queued", N - i);
        let mut ev: *mut rdma_cm_event = null_mut();
        assert_eq!(cm::__wc_rdma_get_cm_event(ch, &mut ev), 0, "event {i}");
        assert_eq!(cm::__wc_rdma_ack_cm_event(ev), 0);
    }
    assert!(!readable());
    let mut ev: *mut rdma_cm_event = null_mut();
    assert_eq!(cm::__wc_rdma_get_cm_event(ch, &mut ev), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EAGAIN)
    );
    assert_eq!(cm::__wc_rdma_destroy_id(id), 0);
    cm::__wc_rdma_destroy_event_channel(ch);
}

extern "C" {
    fn poll(fds: *mut verbs::PollFd, n: u64, timeout: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
}

/// Whether `fd` is readable now (a poll without waiting).
fn readable_now(fd: c_int) -> bool {
    let mut p = verbs::PollFd {
        fd,
        events: 1,
        revents: 0,
    };
    // SAFETY: one valid pollfd (the test's own), no wait.
    unsafe { poll(&mut p, 1, 0) == 1 && p.revents & 1 != 0 }
}

fn set_nonblocking(fd: c_int) {
    // SAFETY: F_GETFL/F_SETFL on the test's own descriptor.
    unsafe {
        let fl = fcntl(fd, 3);
        fcntl(fd, 4, fl | 0o4000);
    }
}

/// A context's asynchronous events, thousands raised before the application reads any
/// (a CQ error of each of many CQs): raising never waits for the reader, `async_fd` is
/// readable until the last is taken, in order, or purged (a CQ's destroy taking its event
/// back), and not after. One octet per event blocked the raiser after about 280.
#[test]
fn async_events_queue_thousands_unread() {
    const N: usize = 5000;
    let q = verbs::AsyncEvents::new().unwrap();
    let fd = q.fd();
    assert!(!readable_now(fd));
    for i in 1..=N {
        let mut e = ibv_async_event {
            event_type: IBV_EVENT_CQ_ERR,
            ..Default::default()
        };
        e.element.cq = i as *mut ibv_cq;
        q.post(e);
    }
    // SAFETY: every event queued names a CQ (element.cq).
    let cq_of = |e: &ibv_async_event| unsafe { e.element.cq } as usize;
    for i in 1..N {
        assert!(
            readable_now(fd),
            "not readable with {} events queued",
            N + 1 - i
        );
        assert_eq!(q.take().map(|e| cq_of(&e)), Some(i));
    }
    assert!(readable_now(fd));
    assert_eq!(q.purge(|e| cq_of(e) == N + 1), 0);
    assert!(
        readable_now(fd),
        "a purge that takes nothing leaves the descriptor readable"
    );
    assert_eq!(q.purge(|e| cq_of(e) == N), 1);
    assert!(!readable_now(fd), "readable with no event queued");
    assert!(q.take().is_none());
}

#[test]
fn addrinfo_passive_active_and_bad() {
    let node = c"10.1.2.3";
    let port = c"7471";
    let mut res: *mut rdma_addrinfo = null_mut();
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(node.as_ptr(), port.as_ptr(), null(), &mut res),
        0
    );
    // SAFETY: the result just made.
    let r = unsafe { &*res };
    assert!(r.ai_src_addr.is_null() && !r.ai_dst_addr.is_null());
    assert_eq!(r.ai_port_space, RDMA_PS_TCP as c_int);
    assert_eq!(r.ai_qp_type, IBV_QPT_RC as c_int);
    // SAFETY: an AF_INET address.
    let d = unsafe { &*r.ai_dst_addr.cast::<sockaddr_in>() };
    assert_eq!(
        (u16::from_be(d.sin_port), u32::from_be(d.sin_addr.s_addr)),
        (7471, 0x0A01_0203)
    );
    cm::__wc_rdma_freeaddrinfo(res);
    let hints = rdma_addrinfo {
        ai_flags: RAI_PASSIVE as c_int,
        ..Default::default()
    };
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(null(), port.as_ptr(), &hints, &mut res),
        0
    );
    // SAFETY: as above.
    let r = unsafe { &*res };
    assert!(!r.ai_src_addr.is_null() && r.ai_dst_addr.is_null());
    cm::__wc_rdma_freeaddrinfo(res);
    // A service the system does not know is getaddrinfo's EAI_SERVICE (glibc's -8), as
    // librdmacm returns it; UDP is refused.
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(
            node.as_ptr(),
            c"no-such-service-warpcore".as_ptr(),
            null(),
            &mut res
        ),
        EAI_SERVICE
    );
    let udp = rdma_addrinfo {
        ai_port_space: RDMA_PS_UDP as c_int,
        ..Default::default()
    };
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(node.as_ptr(), port.as_ptr(), &udp, &mut res),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EOPNOTSUPP)
    );
}

use libc::{EAI_NONAME, EAI_SERVICE};

/// rdma_getaddrinfo(3) of a name or service the system's getaddrinfo refuses returns its
/// `EAI_*` code, as librdmacm v44 does (addrinfo.c, `ucma_getaddrinfo`), which rdma_client
/// prints with `gai_strerror`; it was -1, "Bad value for ai_flags" there. Here without a
/// DNS query: RAI_NUMERICHOST with a name (getaddrinfo's AI_NUMERICHOST: EAI_NONAME), a
/// service name the system does not know (EAI_SERVICE), passive and active.
#[test]
fn getaddrinfo_returns_getaddrinfos_code() {
    let mut res: *mut rdma_addrinfo = null_mut();
    let numeric = rdma_addrinfo {
        ai_flags: RAI_NUMERICHOST as c_int,
        ..Default::default()
    };
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(
            c"host.invalid".as_ptr(),
            c"7471".as_ptr(),
            &numeric,
            &mut res
        ),
        EAI_NONAME
    );
    let passive = rdma_addrinfo {
        ai_flags: RAI_PASSIVE as c_int,
        ..Default::default()
    };
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(
            null(),
            c"no-such-service-warpcore".as_ptr(),
            &passive,
            &mut res
        ),
        EAI_SERVICE
    );
    assert!(res.is_null(), "nothing returned on a failure");
}

/// rdma_getaddrinfo(3) with neither node nor service: the hints alone describe the
/// endpoint, as librdmacm's `rdma_getaddrinfo` takes them (libfabric's verbs provider asks
/// this way for a peer it knows by address): their destination and source addresses are
/// copied. Before, this was EINVAL, and libfabric found no verbs endpoint to a peer.
#[test]
fn addrinfo_from_the_hints_alone() {
    let mut dst = sin_of(0x0A01_0203, 7471);
    let mut src = sin_of(0x0A01_0209, 0);
    let len = std::mem::size_of::<sockaddr_in>() as socklen_t;
    let hints = rdma_addrinfo {
        ai_dst_addr: (&raw mut dst).cast(),
        ai_dst_len: len,
        ai_src_addr: (&raw mut src).cast(),
        ai_src_len: len,
        ai_port_space: RDMA_PS_TCP as c_int,
        ..Default::default()
    };
    let mut res: *mut rdma_addrinfo = null_mut();
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(null(), null(), &hints, &mut res),
        0
    );
    // SAFETY: the result just made.
    let r = unsafe { &*res };
    assert!(!r.ai_src_addr.is_null() && !r.ai_dst_addr.is_null());
    // SAFETY: both are AF_INET addresses of the result.
    let (d, s) = unsafe {
        (
            &*r.ai_dst_addr.cast::<sockaddr_in>(),
            &*r.ai_src_addr.cast::<sockaddr_in>(),
        )
    };
    assert_eq!(
        (u16::from_be(d.sin_port), u32::from_be(d.sin_addr.s_addr)),
        (7471, 0x0A01_0203)
    );
    assert_eq!(u32::from_be(s.sin_addr.s_addr), 0x0A01_0209);
    cm::__wc_rdma_freeaddrinfo(res);
    // A node with a source address in the hints: the source is taken too.
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(c"10.1.2.4".as_ptr(), null(), &hints, &mut res),
        0
    );
    // SAFETY: as above.
    let r = unsafe { &*res };
    // SAFETY: as above.
    let (d, s) = unsafe {
        (
            &*r.ai_dst_addr.cast::<sockaddr_in>(),
            &*r.ai_src_addr.cast::<sockaddr_in>(),
        )
    };
    assert_eq!(u32::from_be(d.sin_addr.s_addr), 0x0A01_0204);
    assert_eq!(u32::from_be(s.sin_addr.s_addr), 0x0A01_0209);
    cm::__wc_rdma_freeaddrinfo(res);
    // An IPv6 literal (a link-local one with its scope, as libfabric's verbs provider asks
    // for each interface's) is EAFNOSUPPORT at once; a name with RAI_NUMERICHOST is
    // getaddrinfo's EAI_NONAME under AI_NUMERICHOST, as librdmacm returns it, without a
    // lookup. Before, both went to the system's resolver and waited on DNS (59 s for
    // `fi_info -p verbs` in a namespace without one).
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(c"fe80::1%eth0".as_ptr(), null(), null(), &mut res),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EAFNOSUPPORT)
    );
    let numeric = rdma_addrinfo {
        ai_flags: (RAI_PASSIVE | RAI_NUMERICHOST) as c_int,
        ..Default::default()
    };
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(c"no-such-host.invalid".as_ptr(), null(), &numeric, &mut res),
        EAI_NONAME
    );
    // Nothing at all is still EINVAL.
    assert_eq!(
        cm::__wc_rdma_getaddrinfo(null(), null(), null(), &mut res),
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EINVAL)
    );
}

fn sin_of(ip: u32, port: u16) -> sockaddr_in {
    sockaddr_in {
        sin_family: 2, // AF_INET
        sin_port: port.to_be(),
        sin_addr: in_addr { s_addr: ip.to_be() },
        ..Default::default()
    }
}

/// Null and unsupported arguments get an errno, never a crash.
#[test]
fn bad_arguments_are_errors() {
    assert_eq!(verbs::__wc_ibv_dealloc_pd(null_mut()), crate::EINVAL);
    assert_eq!(verbs::__wc_ibv_dereg_mr(null_mut()), crate::EINVAL);
    assert_eq!(verbs::__wc_ibv_destroy_cq(null_mut()), crate::EINVAL);
    assert_eq!(verbs::__wc_ibv_destroy_qp(null_mut()), crate::EINVAL);
    assert!(verbs::__wc_ibv_reg_mr(null_mut(), null_mut(), 0, 0).is_null());
    assert!(verbs::__wc_ibv_create_ah(null_mut(), null_mut()).is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(crate::EOPNOTSUPP)
    );
    assert_eq!(cm::__wc_rdma_destroy_id(null_mut()), -1);
    assert_eq!(cm::__wc_rdma_connect(null_mut(), null_mut()), -1);
    assert_eq!(cm::__wc_rdma_get_cm_event(null_mut(), null_mut()), -1);
    assert_eq!(cm::__wc_rdma_ack_cm_event(null_mut()), -1);
}

/// A Read or atomic on a connection granted no initiator depth (ORD 0) is refused with
/// EINVAL, as siw refuses it, not with ENOMEM, which ibv_post_send(3) gives a full send
/// queue and an application retries; a full queue stays ENOMEM.
#[test]
fn read_without_ord_is_einval_not_a_full_queue() {
    assert_eq!(
        crate::errno_of(&warpcore_verbs::Error::NoReadCredits),
        crate::EINVAL
    );
    assert_eq!(
        crate::errno_of(&warpcore_verbs::Error::QueueFull),
        crate::ENOMEM
    );
}

/// A CONNECT_REQUEST reports the peer's RFC 6581 values from the listener's side, as the
/// kernel's rdma_cm reports siw's (siw_proc_mpareq, siw_cm_upcall, iw_conn_req_handler):
/// our responder resources are the peer's ORD, our initiator depth its IRD, each capped at
/// the device's maximum as siw caps them (so an application may hand them back to
/// rdma_accept, which refuses more than the maximum); a Rev 1 request carries none.
#[test]
fn connect_request_reports_the_peers_values_from_our_side_capped() {
    // Peer IRD 5, ORD 3; device maxima 16.
    assert_eq!(cm::request_conn_values(Some(5), Some(3), 16, 16), (3, 5));
    // More than the device holds (0x3FFF: "not negotiated") is its maximum, each against
    // its own limit: responder resources max_qp_rd_atom, initiator depth
    // max_qp_init_rd_atom.
    assert_eq!(
        cm::request_conn_values(Some(40), Some(0x3FFF), 12, 10),
        (12, 10)
    );
    assert_eq!(cm::request_conn_values(None, None, 16, 16), (0, 0));
}

/// An ESTABLISHED reports our negotiated IRD as initiator_depth and our ORD as
/// responder_resources, as cma_iw_handler reports siw's and irdma's upcalls (their own
/// ird/ord into initiator_depth/responder_resources).
#[test]
fn established_reports_ird_as_initiator_depth_as_siw_does() {
    assert_eq!(cm::established_conn_values(1, 2), (2, 1));
}

/// A synchronous call answers the event it took as librdmacm's ucma_complete does: a
/// status of 0 is success whatever the event, a REJECTED ECONNREFUSED, a negative status
/// its errno, a positive one itself.
#[test]
fn synchronous_calls_answer_as_ucma_complete() {
    assert_eq!(cm::sync_result(RDMA_CM_EVENT_ESTABLISHED, 0), Ok(()));
    // An event the call did not queue, with status 0 (librdmacm returns 0).
    assert_eq!(cm::sync_result(RDMA_CM_EVENT_ADDR_RESOLVED, 0), Ok(()));
    assert_eq!(cm::sync_result(RDMA_CM_EVENT_DISCONNECTED, 0), Ok(()));
    assert_eq!(
        cm::sync_result(RDMA_CM_EVENT_REJECTED, -crate::ECONNRESET),
        Err(crate::ECONNREFUSED)
    );
    assert_eq!(
        cm::sync_result(RDMA_CM_EVENT_UNREACHABLE, -crate::ETIMEDOUT),
        Err(crate::ETIMEDOUT)
    );
    // rdma_resolve_addr on a synchronous id whose neighbour never answered ARP within
    // timeout_ms: its ADDR_ERROR's -ETIMEDOUT is the call's ETIMEDOUT (the C contract
    // id_device_pd.c checks it end to end).
    assert_eq!(
        cm::sync_result(RDMA_CM_EVENT_ADDR_ERROR, -crate::ETIMEDOUT),
        Err(crate::ETIMEDOUT)
    );
    // A positive status is the errno as it stands (librdmacm's ERR(status)).
    assert_eq!(cm::sync_result(RDMA_CM_EVENT_CONNECT_ERROR, 5), Err(5));
}

/// `ibv_alloc_pd` once every protection domain number was given out: NULL with ENOMEM (the
/// verbs refuse rather than hand out a number a live domain has).
#[test]
fn exhausted_domain_numbers_are_enomem() {
    assert_eq!(
        crate::errno_of(&warpcore_verbs::Error::PdNumbersExhausted),
        crate::ENOMEM
    );
}

/// The count behind `ibv_query_device`'s `max_pd`, `max_cq` and `max_srq`: `max` places are
/// taken, the next is `ENOMEM` (siw_alloc_pd, siw_create_cq, siw_create_srq), a place given
/// back is taken again, and giving back more than was taken does not wrap the count (the
/// C contract query_limits.c checks the verbs end to end).
#[test]
fn live_objects_are_held_to_the_advertised_limit() {
    let l = verbs::Live::new(3);
    for _ in 0..3 {
        assert_eq!(l.take(), Ok(()));
    }
    assert_eq!(l.take(), Err(crate::ENOMEM));
    l.give_back();
    assert_eq!(l.take(), Ok(()));
    assert_eq!(l.take(), Err(crate::ENOMEM));
    for _ in 0..5 {
        l.give_back();
    }
    for _ in 0..3 {
        assert_eq!(l.take(), Ok(()));
    }
    assert_eq!(l.take(), Err(crate::ENOMEM));
}

/// `ibv_reg_mr`'s check of the range against the process's mappings, as ib_umem_get makes it
/// when it pins the pages: covered without a gap, readable, writable where the region may
/// be written (EFAULT otherwise).
#[test]
fn reg_mr_range_must_be_mapped_with_the_access_asked() {
    let maps = "\
1000-3000 rw-p 00000000 00:00 0
3000-4000 r--p 00000000 00:00 0 /lib/x.so
4000-5000 rw-p 00000000 00:00 0
6000-7000 rw-p 00000000 00:00 0
7000-8000 ---p 00000000 00:00 0
";
    let c = |a, e, w| verbs::covered(maps, a, e, w);
    assert_eq!(
        c(0x1000, 0x3000, true),
        Ok(()),
        "inside one writable mapping"
    );
    assert_eq!(
        c(0x2800, 0x3000, true),
        Ok(()),
        "ending where the mapping ends"
    );
    assert_eq!(
        c(0x1000, 0x5000, false),
        Ok(()),
        "three mappings end to end, read only"
    );
    assert_eq!(
        c(0x1000, 0x5000, true),
        Err(crate::EFAULT),
        "a read-only page in the middle, written"
    );
    assert_eq!(
        c(0x3000, 0x3800, true),
        Err(crate::EFAULT),
        "a read-only page, written"
    );
    assert_eq!(
        c(0x4000, 0x6000, false),
        Err(crate::EFAULT),
        "a gap after the mapping"
    );
    assert_eq!(
        c(0x5000, 0x5800, false),
        Err(crate::EFAULT),
        "nothing mapped there"
    );
    assert_eq!(
        c(0x6800, 0x7800, false),
        Err(crate::EFAULT),
        "into a PROT_NONE page"
    );
    assert_eq!(
        c(0x500, 0x1800, false),
        Err(crate::EFAULT),
        "starting before the first mapping"
    );
    assert_eq!(
        c(0x7ff0, 0x9000, false),
        Err(crate::EFAULT),
        "past the last mapping"
    );
    assert_eq!(
        verbs::mapped_for(usize::MAX - 0xfff, 0x2000, false),
        Err(crate::EINVAL),
        "a range that wraps"
    );
    // This process's own memory, as the check reads it.
    let mut buf = vec![0u8; 3 * 4096];
    assert_eq!(
        verbs::mapped_for(buf.as_mut_ptr() as usize, buf.len(), true),
        Ok(())
    );
    assert_eq!(
        verbs::mapped_for(8, 4096, false),
        Err(crate::EFAULT),
        "page zero"
    );
}

/// The variables the drop-in reads itself: a bad value, or one that is not UTF-8, stops
/// the engine's start naming the variable. Before, WARPCORE_SETTLE_MS=abc was "using 0"
/// (read only at the first connection, the engine long started), and a WARPCORE_RFC7306,
/// WARPCORE_SETTLE_MS or WARPCORE_MEMIF_WAIT that is not UTF-8 was taken for unset: its
/// default, silently.
#[test]
fn own_variables_bad_or_not_utf8_are_refused() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let with = |k: &'static str, v: OsString| move |q: &str| (q == k).then(|| v.clone());
    assert_eq!(
        crate::own_vars(|_| None),
        Ok(crate::OwnVars {
            rfc7306: true,
            settle_ms: 0,
            memif_wait_s: 30
        })
    );
    assert_eq!(
        crate::own_vars(with("WARPCORE_SETTLE_MS", "100".into())).map(|o| o.settle_ms),
        Ok(100)
    );
    for var in [
        "WARPCORE_RFC7306",
        "WARPCORE_SETTLE_MS",
        "WARPCORE_MEMIF_WAIT",
    ] {
        let e = crate::own_vars(with(var, OsString::from_vec(b"1\xff".to_vec()))).expect_err(var);
        assert!(e.starts_with(var) && e.contains("not valid UTF-8"), "{e}");
        let e = crate::own_vars(with(var, "abc".into())).expect_err(var);
        assert!(e.starts_with(var) && e.contains("\"abc\""), "{e}");
    }
}

/// The body of the function `name` defined in `src` (the text between its outer braces,
/// line comments removed), and its parameter list; `None` if `src` defines no such
/// function. A declaration (`fn name(..);` in an `extern` block) is skipped.
fn fn_body_and_params(src: &str, name: &str) -> Option<(String, String)> {
    let src: String = src
        .lines()
        .map(|l| match l.find("// ") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ if l.trim_start().starts_with("//") => "",
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let pat = format!("fn {name}(");
    let mut from = 0;
    while let Some(at) = src[from..].find(&pat) {
        let start = from + at + pat.len();
        from = start;
        // The parameter list, to its matching parenthesis.
        let mut depth = 1;
        let mut end = start;
        for (i, c) in src[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = start + i;
                break;
            }
        }
        let params = src[start..end].to_string();
        let rest = &src[end..];
        let (Some(brace), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < brace) {
            continue; // a declaration
        }
        let body_start = end + brace + 1;
        let mut depth = 1;
        for (i, c) in src[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                return Some((src[body_start..body_start + i].trim().to_string(), params));
            }
        }
    }
    None
}

/// Every exported function (`extern "C" fn`, the `__wc_` names and the `context->ops`
/// entries) that uses a pointer the application passes runs its body under `guard`, or
/// is one call to a function that does: a panic of ours (a bug) is then an error with
/// `errno` `EIO`, never an unwind into C, which aborts the application. `ibv_query_srq`,
/// `ibv_destroy_srq`, `ibv_dealloc_pd`, `ibv_dealloc_mw`, `ibv_close_device`,
/// `rdma_set_option`, `rdma_freeaddrinfo` and others ran unguarded.
#[test]
fn every_export_runs_under_guard() {
    let sources = [include_str!("verbs.rs"), include_str!("cm.rs")];
    let guarded = |name: &str| {
        sources
            .iter()
            .find_map(|s| fn_body_and_params(s, name))
            .is_some_and(|(b, _)| b.starts_with("guard("))
    };
    let mut unguarded = Vec::new();
    let mut seen = 0;
    for src in sources {
        for line in src.lines() {
            let Some(at) = line.find("extern \"C\" fn ") else {
                continue;
            };
            let name: String = line[at + 14..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue; // a function pointer type
            }
            let Some((body, params)) = fn_body_and_params(src, &name) else {
                continue;
            };
            seen += 1;
            // The pointers it uses: parameters of a pointer type not named `_...`.
            let uses_pointer = params.split(',').any(|p| {
                let mut kv = p.splitn(2, ':');
                let (n, t) = (kv.next().unwrap_or("").trim(), kv.next().unwrap_or(""));
                t.contains('*') && !n.starts_with('_') && !n.is_empty()
            });
            if !uses_pointer || body.starts_with("guard(") {
                continue;
            }
            // One call to a guarded function (ibv_reg_mr's `reg_mr`, ...).
            let callee: String = body
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let one_call = !callee.is_empty()
                && body[callee.len()..].starts_with('(')
                && body.ends_with(')')
                && !body.contains(';');
            if !(one_call && guarded(&callee)) {
                unguarded.push(name);
            }
        }
    }
    assert!(seen > 100, "only {seen} exported functions found");
    assert!(
        unguarded.is_empty(),
        "exported functions that use the caller's pointers outside guard(): {unguarded:?}"
    );
}
