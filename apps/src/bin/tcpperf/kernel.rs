//! The same tests over the kernel's TCP (blocking sockets, TCP_NODELAY), for an
//! apples-to-apples baseline: same protocol, same clock, same histogram.
use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

pub(crate) fn server(addr: &str, tests: u32) -> Result<(), String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    warpcore_apps::outln!("kernel-server: listening on {addr}");
    serve(&l, tests)
}

fn serve(l: &TcpListener, tests: u32) -> Result<(), String> {
    let mut served = 0;
    while tests == 0 || served < tests {
        let (mut s, _) = l.accept().map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut h = [0u8; 16];
        s.read_exact(&mut h).map_err(|e| e.to_string())?;
        if &h[..4] != MAGIC {
            return Err("bad test header".into());
        }
        let kind = u32::from_be_bytes(h[4..8].try_into().expect("4 bytes"));
        let param = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
        match kind {
            // The size comes from the network: refuse what no tcpperf client asks for
            // rather than allocate it.
            KIND_RR if !(1..=MAX_RR_SIZE).contains(&param) => {
                eprintln!(
                    "kernel-server: refused a request/response test of {param} B (1 to \
                     {MAX_RR_SIZE})"
                );
                continue;
            }
            KIND_RR => {
                let mut msg = vec![0u8; param as usize];
                while s.read_exact(&mut msg).is_ok() {
                    s.write_all(&msg).map_err(|e| e.to_string())?;
                }
            }
            KIND_BULK => {
                let mut buf = vec![0u8; 1 << 20];
                let mut count = 0u64;
                while count < param {
                    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
                    if n == 0 {
                        break;
                    }
                    count += n as u64;
                }
                s.write_all(&count.to_be_bytes())
                    .map_err(|e| e.to_string())?;
                while s.read(&mut buf).map_err(|e| e.to_string())? > 0 {}
            }
            _ => return Err(format!("unknown test kind {kind}")),
        }
        served += 1;
    }
    warpcore_apps::outln!("kernel-server: {served} test connections served");
    Ok(())
}

pub(crate) fn client(addr: &str, test: &TestArgs) -> Result<(), String> {
    for &kind in &test.test {
        one(addr, test, kind)?;
    }
    Ok(())
}

fn one(addr: &str, test: &TestArgs, kind: TestKind) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let (code, param) = match kind {
        TestKind::Rr => (KIND_RR, test.size),
        TestKind::Bulk => (KIND_BULK, test.bytes),
    };
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(MAGIC);
    h[4..8].copy_from_slice(&code.to_be_bytes());
    h[8..].copy_from_slice(&param.to_be_bytes());
    s.write_all(&h).map_err(|e| e.to_string())?;
    match kind {
        TestKind::Rr => {
            let mut hist = rtt_histogram();
            let msg = vec![0x42u8; test.size as usize];
            let mut reply = vec![0u8; test.size as usize];
            let mut t_start = StdInstant::now();
            let mut cpu0 = cpu_seconds();
            for i in 0..test.warmup + test.iterations {
                if i == test.warmup {
                    t_start = StdInstant::now();
                    cpu0 = cpu_seconds();
                }
                let t = StdInstant::now();
                s.write_all(&msg).map_err(|e| e.to_string())?;
                s.read_exact(&mut reply).map_err(|e| e.to_string())?;
                if i >= test.warmup {
                    record_rtt(&mut hist, t.elapsed().as_nanos() as u64);
                }
            }
            let elapsed = t_start.elapsed().as_secs_f64();
            report_rr("kernel", test.size, &hist, elapsed, cpu_seconds() - cpu0);
        }
        TestKind::Bulk => {
            let buf = vec![0u8; 1 << 20];
            let t = StdInstant::now();
            let cpu0 = cpu_seconds();
            let mut left = test.bytes;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                s.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                left -= n as u64;
            }
            let mut r = [0u8; 8];
            s.read_exact(&mut r).map_err(|e| e.to_string())?;
            let elapsed = t.elapsed().as_secs_f64();
            if u64::from_be_bytes(r) != test.bytes {
                return Err("server counted a different byte count".into());
            }
            report_bulk("kernel", test.bytes, elapsed, cpu_seconds() - cpu0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header from the network asking for an echo buffer no client would ask for is
    /// refused (that connection closed, nothing allocated) and the server goes on.
    #[test]
    fn server_refuses_an_oversized_request_size() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || serve(&l, 1));
        for param in [u64::MAX, MAX_RR_SIZE + 1, 0] {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut h = [0u8; 16];
            h[..4].copy_from_slice(MAGIC);
            h[4..8].copy_from_slice(&KIND_RR.to_be_bytes());
            h[8..].copy_from_slice(&param.to_be_bytes());
            s.write_all(&h).unwrap();
            // The server closes the connection without an answer.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            assert!(rest.is_empty());
        }
        // Still serving: a real test completes it.
        let test = TestArgs {
            test: vec![TestKind::Rr],
            size: 8,
            iterations: 3,
            warmup: 1,
            bytes: 1,
            buffer: 1 << 16,
            timeout_s: 10,
            congestion: Cc::Cubic,
        };
        one(&addr.to_string(), &test, TestKind::Rr).unwrap();
        server.join().unwrap().unwrap();
    }
}
