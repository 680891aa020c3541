//! Server and client over DPDK net_memif between two processes: a Send, an RDMA Write, an
//! RDMA Read, a Write with Immediate (RFC 7306: the data lands in the server's region and
//! the 64-bit immediate value arrives in its receive completion) and a FetchAdd (the
//! server's counter goes up by one and the client gets the value it had), printing what
//! happened.
//!
//!     cargo run --release -p warpcore-verbs --example memif_hello -- server &
//!     cargo run --release -p warpcore-verbs --example memif_hello -- client
//!
//! Both run without hugepages or PCI devices (`--no-huge --no-pci`); the memif socket is
//! /tmp/wceng-example.sock (or the path in `WCENG_SOCK`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use warpcore_verbs::dpdk::{init_eal, DpdkPort};
use warpcore_verbs::*;

const PORT: u16 = 7000;
const WAIT: Duration = Duration::from_secs(30);

fn open(role: &str) -> Result<Context, Error> {
    let sock = std::env::var("WCENG_SOCK").unwrap_or_else(|_| "/tmp/wceng-example.sock".into());
    let (lcore, ip, mac) = match role {
        "server" => ("0", [198, 18, 0, 2], 2),
        _ => ("1", [198, 18, 0, 1], 1),
    };
    let args: Vec<String> = [
        "-l",
        lcore,
        "--no-huge",
        "-m",
        "512",
        "--no-shconf",
        "--no-pci",
        "--no-telemetry",
        "--log-level=error",
        &format!("--file-prefix=wceng-ex-{role}-{}", std::process::id()),
        &format!("--vdev=net_memif0,role={role},socket={sock},socket-abstract=no"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let eal = init_eal("memif_hello", &args)?;
    let port = DpdkPort::open(&eal, "net_memif0", 1, 8191)?;
    let mut cfg = Config::new(Device::Dpdk(port), ip);
    cfg.mac = Some([2, 0, 0, 0, 0, mac]);
    // Stop polling before closing the memif port, so the peer never sees a disconnect in
    // the middle of its rx burst (net_memif in DPDK 22.11 can crash then).
    cfg.engine.shutdown_linger_ms = 500;
    Context::open(cfg)
}

fn text(mr: &MemoryRegion, at: usize, len: usize) -> Result<String, Error> {
    let mut buf = vec![0u8; len];
    mr.read(at, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn server() -> Result<(), Error> {
    let ctx = open("server")?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64)?;
    // Receive buffers at 0 and 64, RDMA Write target at 1024, Write with Immediate target
    // at 1536, RDMA Read source at 2048, a 64-bit counter for FetchAdd at 3072 (8-aligned).
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(4096, access)?;
    mr.write(2048, b"greetings from the server")?;
    mr.atomic_u64(3072)?.store(41, Ordering::SeqCst);
    ctx.listen(PORT, &MpaParams::default())?;
    println!("server: listening on 198.18.0.2:{PORT}");
    let Some(CmEvent::ConnectRequest(req)) = ctx.next_event(Duration::from_secs(120)) else {
        return Err(Error::Timeout);
    };
    println!(
        "server: request, private data {:?}",
        String::from_utf8_lossy(&req.private_data)
    );
    let mut init = QpInit::new(&cq, &cq);
    init.core = Some(usize::from(req.request.core));
    let qp = pd.create_qp(&init)?;
    qp.post_recv(&RecvWr::new(1, &[mr.sge(0, 64)])?)?;
    qp.post_recv(&RecvWr::new(2, &[mr.sge(64, 64)])?)?;
    // The Immediate Data of the Write with Immediate consumes a receive (no data placed).
    qp.post_recv(&RecvWr::new(3, &[])?)?;
    // Tell the client our STag in the accept's private data.
    ctx.accept(&req, &qp, &mr.stag().to_be_bytes())?;
    let wc = cq.wait(WAIT)?;
    println!(
        "server: Send arrived: {:?}",
        text(&mr, 0, wc.byte_len as usize)?
    );
    let wc = cq.wait(WAIT)?;
    println!(
        "server: Write with Immediate arrived: {:?}, immediate {:#x} ({:?})",
        text(&mr, 1536, 25)?,
        wc.imm.unwrap_or_default(),
        wc.opcode
    );
    cq.wait(WAIT)?; // the client's last Send: its Write, Read and FetchAdd are done
    println!("server: RDMA Write arrived: {:?}", text(&mr, 1024, 21)?);
    println!(
        "server: counter after the FetchAdd: {}",
        mr.atomic_u64(3072)?.load(Ordering::SeqCst)
    );
    match ctx.next_event(WAIT) {
        Some(CmEvent::Established(_)) => {}
        e => println!("server: {e:?}"),
    }
    let e = ctx.next_event(WAIT);
    println!("server: {e:?}");
    Ok(())
}

fn client() -> Result<(), Error> {
    let ctx = open("client")?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64)?;
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    // Connect, retrying until the memif link and the server are up.
    let (qp, stag) = loop {
        let qp = pd.create_qp(&QpInit::new(&cq, &cq))?;
        qp.connect(
            [198, 18, 0, 2],
            PORT,
            &MpaParams::default(),
            b"hello, server",
        )?;
        match ctx.next_event(WAIT) {
            Some(CmEvent::Established(e)) => {
                let stag = u32::from_be_bytes(e.private_data[..4].try_into().expect("STag"));
                break (qp, stag);
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    println!("client: connected, server STag {stag:#x}");
    mr.write(0, b"hello from the client")?;
    mr.write(100, b"written by RDMA Write")?;
    qp.post_send(&SendWr::new(1, SendOp::Send, &[mr.sge(0, 21)])?)?;
    let write = SendOp::Write {
        remote_stag: stag,
        remote_to: 1024,
    };
    qp.post_send(&SendWr::new(2, write, &[mr.sge(100, 21)])?)?;
    let read = SendOp::Read {
        remote_stag: stag,
        remote_to: 2048,
    };
    qp.post_send(&SendWr::new(3, read, &[mr.sge(200, 25)])?)?;
    mr.write(300, b"written with an immediate")?;
    let write_imm = SendOp::WriteWithImm {
        remote_stag: stag,
        remote_to: 1536,
        imm: 0xC0FFEE,
    };
    qp.post_send(&SendWr::new(4, write_imm, &[mr.sge(300, 25)])?)?;
    let fetch_add = SendOp::AtomicFetchAdd {
        remote_stag: stag,
        remote_to: 3072,
        add: 1,
        add_mask: 0,
    };
    qp.post_send(&SendWr::new(5, fetch_add, &[mr.sge(400, 8)])?)?;
    qp.post_send(&SendWr::new(6, SendOp::Send, &[])?)?;
    for _ in 0..6 {
        let wc = cq.wait(WAIT)?;
        println!(
            "client: completion {} {:?} {:?}",
            wc.wr_id, wc.opcode, wc.status
        );
    }
    println!("client: RDMA Read returned: {:?}", text(&mr, 200, 25)?);
    println!(
        "client: FetchAdd returned the counter's old value {}",
        mr.atomic_u64(400)?.load(Ordering::SeqCst)
    );
    qp.disconnect()?;
    println!("client: {:?}", ctx.next_event(WAIT));
    Ok(())
}

fn main() {
    let role = std::env::args().nth(1).unwrap_or_default();
    let r = match role.as_str() {
        "server" => server(),
        "client" => client(),
        _ => {
            eprintln!("usage: memif_hello server|client");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("{role}: {e}");
        std::process::exit(1);
    }
}
