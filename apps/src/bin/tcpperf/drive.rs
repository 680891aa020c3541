//! Running a role on a stack: the poll loop, and the in-memory mode (both stacks in one
//! process over the link).

use super::*;

// ---------------------------------------------------------------- drivers

pub(crate) enum Role {
    Server(Server, u32),
    /// The running test, the tests still to run, and the server.
    Client(Box<Client>, Vec<TestKind>, (Ipv4Address, u16)),
    Exchange(Exchange),
}

/// What to run on a stack, before the stack exists.
#[derive(Debug)]
pub(crate) enum RoleSpec {
    Server {
        port: u16,
        buffer: usize,
        tests: u32,
    },
    Client {
        server: (Ipv4Address, u16),
        test: TestArgs,
    },
    Exchange {
        peer: Option<String>,
        listen: u16,
        bytes: u64,
    },
}

/// Opens the listener or connection `spec` asks for.
pub(crate) fn make_role<D: PollDevice>(s: &mut Stack<D>, spec: RoleSpec) -> Result<Role, String> {
    Ok(match spec {
        RoleSpec::Server {
            port,
            buffer,
            tests,
        } => Role::Server(Server::new(s, port, buffer)?, tests),
        RoleSpec::Client { server, test } => {
            let mut kinds = test.test.clone();
            kinds.reverse();
            let first = kinds.pop().ok_or("no test given")?;
            Role::Client(
                Box::new(Client::new(s, server, test, first)?),
                kinds,
                server,
            )
        }
        RoleSpec::Exchange {
            peer,
            listen,
            bytes,
        } => {
            let mut x = Exchange {
                conn: None,
                listener: None,
                bytes,
                tx_salt: CLIENT_SALT,
                rx_salt: SERVER_SALT,
                sent: 0,
                received: 0,
                fin_sent: false,
                peer_closed: false,
                connected: false,
                error: None,
            };
            match peer {
                Some(p) => {
                    let (ip, port) = p
                        .split_once(':')
                        .ok_or_else(|| format!("--peer {p}: expected address:port"))?;
                    let ip: Ipv4Address = ip.parse().map_err(|_| format!("bad address {ip}"))?;
                    let port: u16 = port.parse().map_err(|_| format!("bad port {port}"))?;
                    x.conn = Some(
                        s.connect((ip, port), None, &tuning(4 << 20))
                            .map_err(|e| e.to_string())?,
                    );
                }
                None => {
                    x.tx_salt = SERVER_SALT;
                    x.rx_salt = CLIENT_SALT;
                    x.listener = Some(
                        s.listen(listen, 1, &tuning(4 << 20))
                            .map_err(|e| e.to_string())?,
                    );
                }
            }
            Role::Exchange(x)
        }
    })
}

/// Polls one stack and its application until the application is done or time runs out.
pub(crate) fn drive<D: PollDevice>(
    s: &mut Stack<D>,
    clock: &Clock,
    mut role: Role,
    timeout_s: u64,
    label: &str,
) -> Result<(), String> {
    let deadline = StdInstant::now() + std::time::Duration::from_secs(timeout_s);
    let mut spins = 0u32;
    loop {
        let now = clock.now();
        s.poll(now);
        while let Some(e) = s.next_event() {
            match &mut role {
                Role::Server(sv, _) => sv.on_event(s, e),
                Role::Client(cl, _, _) => cl.on_event(e),
                Role::Exchange(x) => x.on_event(s, e),
            }
        }
        let done = match &mut role {
            Role::Server(sv, tests) => {
                sv.step(s);
                *tests > 0 && sv.finished >= *tests
            }
            Role::Client(cl, rest, server) => {
                cl.step(s);
                if cl.phase == ClientPhase::Finished {
                    // The finished connection closes on its own (FIN already sent).
                    cl.report(label)?;
                    match rest.pop() {
                        Some(kind) => {
                            **cl = Client::new(s, *server, cl.test.clone(), kind)?;
                            false
                        }
                        None => true,
                    }
                } else {
                    false
                }
            }
            Role::Exchange(x) => {
                x.step(s);
                x.done(s)
            }
        };
        if done {
            // Let the last ACKs and FINs out.
            for _ in 0..1000 {
                s.poll(clock.now());
            }
            break;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) && timeout_s > 0 && StdInstant::now() > deadline {
            return Err(format!("{label}: timed out after {timeout_s} s"));
        }
    }
    match role {
        Role::Client(..) => Ok(()),
        Role::Exchange(x) => match x.error {
            Some(e) => Err(e),
            None => {
                warpcore_apps::outln!(
                    "exchange ok: sent {} and received {} bytes, byte-exact",
                    x.sent,
                    x.received
                );
                warpcore_apps::outln!("RESULT mode={label} test=exchange bytes={} ok=1", x.bytes);
                Ok(())
            }
        },
        Role::Server(sv, _) => {
            warpcore_apps::outln!("server: {} test connections served", sv.finished);
            Ok(())
        }
    }
}

pub(crate) fn run_memory(test: TestArgs, mtu: usize, pcap: Option<String>) -> Result<(), String> {
    let cfg = LinkConfig {
        mtu,
        ..LinkConfig::default()
    };
    let (ea, eb) = link::pair(&cfg);
    let clock = Clock(StdInstant::now());
    let ip_b = Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 2), 24);
    let mut b = new_stack(
        eb,
        &stack_config([2, 0, 0, 0, 0, 2], ip_b, None),
        clock.now(),
    )
    .map_err(|e| e.to_string())?;
    let mut server = Server::new(&mut b, 5201, test.buffer())?;
    let ip_a = Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 1), 24);
    let cfg_a = stack_config([2, 0, 0, 0, 0, 1], ip_a, None);
    match pcap {
        Some(path) => {
            let f = std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?;
            let dev = Capture::new(ea, BufWriter::new(f), 65535);
            let mut a = new_stack(dev, &cfg_a, clock.now()).map_err(|e| e.to_string())?;
            let r = memory_loop(&mut a, &mut b, &mut server, &clock, test);
            with_capture(r, a.device_mut(), &path)
        }
        None => {
            let mut a = new_stack(ea, &cfg_a, clock.now()).map_err(|e| e.to_string())?;
            memory_loop(&mut a, &mut b, &mut server, &clock, test)
        }
    }
}

/// Completes the `--pcap` capture `cap` of `path` after a run whose outcome is `run`: a
/// capture missing frames (failed writes: a full disk) fails the run, naming the file,
/// instead of leaving a file that looks complete.
pub(crate) fn with_capture<D: PollDevice, W: std::io::Write>(
    run: Result<(), String>,
    cap: &mut Capture<D, W>,
    path: &str,
) -> Result<(), String> {
    let (frames, errors) = cap.finish();
    if errors == 0 {
        eprintln!("tcpperf: {frames} frames captured to {path}");
        return run;
    }
    let lost = format!(
        "--pcap {path}: {errors} writes failed, the capture misses frames ({frames} written)"
    );
    match run {
        Ok(()) => Err(lost),
        Err(e) => Err(format!("{e}; {lost}")),
    }
}

pub(crate) fn memory_loop<DA: PollDevice, DB: PollDevice>(
    a: &mut Stack<DA>,
    b: &mut Stack<DB>,
    server: &mut Server,
    clock: &Clock,
    test: TestArgs,
) -> Result<(), String> {
    let deadline = StdInstant::now() + std::time::Duration::from_secs(test.timeout_s);
    let server_addr = (Ipv4Address::new(198, 18, 0, 2), 5201);
    let mut kinds = test.test.clone();
    kinds.reverse();
    let first = kinds.pop().ok_or("no test given")?;
    let mut client = Client::new(a, server_addr, test.clone(), first)?;
    let mut spins = 0u32;
    loop {
        if client.phase == ClientPhase::Finished {
            client.report("memory")?;
            match kinds.pop() {
                Some(kind) => client = Client::new(a, server_addr, test.clone(), kind)?,
                None => return Ok(()),
            }
        }
        let now = clock.now();
        a.poll(now);
        while let Some(e) = a.next_event() {
            client.on_event(e);
        }
        client.step(a);
        b.poll(now);
        while let Some(e) = b.next_event() {
            server.on_event(b, e);
        }
        server.step(b);
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) && StdInstant::now() > deadline {
            return Err("memory: timed out".into());
        }
    }
}
