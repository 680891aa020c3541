//! Server and client over DPDK net_memif between two processes: a Send, an RDMA Write, an
//! RDMA Read, a Write with Immediate (RFC 7306: the data lands in the server's region and
//! the 64-bit immediate value arrives in its receive completion) and a FetchAdd (the
//! server's counter goes up by one and the client gets the value it had), printing what
//! happened.
//!
//!     cargo run --release -p warpcore-apps --example memif_hello -- server &
//!     cargo run --release -p warpcore-apps --example memif_hello -- client
//!
//! The port is opened by the tools' device layer (`warpcore_apps::device`, the same flags
//! as iwperf's: `--memif PATH`, `--vdev`, `--cores`, ...; by default the memif socket
//! /tmp/wceng-example.sock, or the path in `WCENG_SOCK`); everything after that is the
//! verbs API.

use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use warpcore_apps::device::{DeviceArgs, EngineOptions, MemifRole};
use warpcore_verbs::*;

const PORT: u16 = 7000;
const WAIT: Duration = Duration::from_secs(30);

/// `memif_hello server|client [device flags]`.
#[derive(Parser, Debug)]
struct Cli {
    /// `server` or `client`.
    role: String,
    #[command(flatten)]
    dev: DeviceArgs,
}

fn open(cli: &Cli) -> Result<Context, String> {
    let server = cli.role == "server";
    let mut dev = cli.dev.clone();
    if !dev.names_port() {
        let sock = std::env::var("WCENG_SOCK").unwrap_or_else(|_| "/tmp/wceng-example.sock".into());
        dev.memif = Some(sock.into());
    }
    let o = EngineOptions {
        default_ip: Some(if server {
            [198, 18, 0, 2].into()
        } else {
            [198, 18, 0, 1].into()
        }),
        fixed_mac: true,
        // Stop polling before closing the memif port, so the peer never sees a disconnect
        // in the middle of its rx burst (net_memif in DPDK 22.11 can crash then).
        configure: &|c: &mut Config| c.engine.shutdown_linger_ms = 500,
        ..EngineOptions::new("memif_hello", MemifRole::serving(server))
    };
    dev.open_engine(&o)
        .map(|ep| ep.ctx)
        .map_err(|e| e.to_string())
}

fn text(mr: &MemoryRegion, at: usize, len: usize) -> Result<String, Error> {
    let mut buf = vec![0u8; len];
    mr.read(at, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn server(ctx: Context) -> Result<(), Error> {
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
    // The client's last Send, posted once its FetchAdd completed: its Write, Read and
    // FetchAdd are done.
    cq.wait(WAIT)?;
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

fn client(ctx: Context) -> Result<(), Error> {
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
        solicited: false,
    };
    qp.post_send(&SendWr::new(4, write_imm, &[mr.sge(300, 25)])?)?;
    let fetch_add = SendOp::AtomicFetchAdd {
        remote_stag: stag,
        remote_to: 3072,
        add: 1,
        add_mask: 0,
    };
    qp.post_send(&SendWr::new(5, fetch_add, &[mr.sge(400, 8)])?)?;
    let show = |wc: Completion| {
        println!(
            "client: completion {} {:?} {:?}",
            wc.wr_id, wc.opcode, wc.status
        )
    };
    for _ in 0..5 {
        show(cq.wait(WAIT)?);
    }
    // Only now the last Send: a Send may complete at the responder before an earlier
    // Atomic Request has been executed there (RFC 7306 section 5.4, rule 6), but not
    // before the Atomic Response reached us (rules 1 and 7).
    qp.post_send(&SendWr::new(6, SendOp::Send, &[])?)?;
    show(cq.wait(WAIT)?);
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
    let cli = Cli::parse();
    if cli.role != "server" && cli.role != "client" {
        eprintln!("usage: memif_hello server|client [device flags]");
        std::process::exit(2);
    }
    let ctx = match open(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", cli.role);
            std::process::exit(1);
        }
    };
    let r = if cli.role == "server" {
        server(ctx)
    } else {
        client(ctx)
    };
    if let Err(e) = r {
        eprintln!("{}: {e}", cli.role);
        std::process::exit(1);
    }
}
