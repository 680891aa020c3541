//! `iwperf`: perftest-style RDMA benchmarks (`write_lat`, `write_bw`, `read_lat`, `read_bw`,
//! `send_lat`, `send_bw`) over Warpcore's user-space iWARP engine.
//!
//! One binary, two roles as in perftest: without an address it is the server; with the
//! server's address it is the client. `--loopback` runs both in one process. The output is
//! perftest's banner and table, followed by an HdrHistogram percentile block. See
//! docs/iwperf.md for the options, the in-band exchange format and the measurements.
#![forbid(unsafe_code)]

mod cli;
mod net;
mod perftest;
mod report;
mod run;
mod tests;
mod wire;

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Duration;

use warpcore_verbs::{MpaParams, RtrType, RtrTypes};

use cli::{Cli, OnOff, P2p, TestName};
use net::{Endpoint, Opened};
use report::{BannerInfo, LINE};
use run::{Conn, Layout};
use tests::{Outcome, Phase};

fn main() -> ExitCode {
    let (mut cli, matches) = warpcore_apps::parse_args_with_matches::<Cli>();
    cli.note_given(&matches);
    if let Err(e) = cli.validate() {
        eprintln!("iwperf: {e}");
        return ExitCode::from(2);
    }
    match run(&cli) {
        Ok(Verdict::Clean) => ExitCode::SUCCESS,
        // The `verify: FAILED:` line is printed already.
        Ok(Verdict::VerifyFailed) => ExitCode::from(3),
        Err(e) => {
            eprintln!("iwperf: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How a run that completed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing failed (and, under `--verify`, something was checked).
    Clean,
    /// `--verify` found a mismatch, or checked nothing (exit status 3).
    VerifyFailed,
}

impl Verdict {
    /// Both sides' verdicts (loopback): failed if either failed.
    fn and(self, other: Verdict) -> Verdict {
        if self == Verdict::Clean {
            other
        } else {
            self
        }
    }
}

fn mpa_params(cli: &Cli) -> MpaParams {
    MpaParams {
        rev: cli.mpa_rev,
        crc: cli.crc == OnOff::On,
        markers: cli.markers == OnOff::On,
        // -o: the Reads and atomics outstanding at once, both ways.
        ird: cli.outs.unwrap_or(16),
        ord: cli.outs.unwrap_or(16),
        peer_to_peer: cli.mpa_rev == 2 && cli.p2p != P2p::None,
        // As initiator, the one RTR type asked for (RFC 6581 §9.2); as responder (the
        // server), every type is accepted (the default).
        rtr_offer: match cli.p2p {
            P2p::Send => RtrTypes::SEND,
            P2p::Read => RtrTypes::READ,
            _ => RtrTypes::WRITE,
        },
        ..MpaParams::default()
    }
}

fn run(cli: &Cli) -> Result<Verdict, String> {
    let opened = net::open(cli)?;
    let mpa = mpa_params(cli);
    let r = match opened {
        Opened::Single(ep) => {
            if let Some(server) = cli.server.filter(|_| cli.perftest) {
                perftest::client(cli, &ep, server, &mpa).map(|()| Verdict::Clean)
            } else if let Some(server) = cli.server {
                client_role(cli, &ep, server, &mpa)
            } else if cli.perftest {
                perftest::serve(cli, &ep, &mpa).map(|()| Verdict::Clean)
            } else {
                server_role(cli, &ep, &mpa, true)
            }
        }
        Opened::Pair(s, c) => std::thread::scope(|sc| {
            let server = sc.spawn(|| server_role(cli, &s, &mpa, false));
            let r = client_role(cli, &c, s.ip, &mpa);
            let rs = server
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            // Both verdicts: the client printed the verify line (with the server's first
            // mismatch, which the server reported to it).
            match (r, rs) {
                (Ok(a), Ok(b)) => Ok(a.and(b)),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }),
    };
    // The engines are stopped now (their threads joined): the capture is complete.
    if let Some(cap) = &cli.dev.capture {
        if warpcore_apps::device::raw_capture_path(cap).exists() {
            let n = warpcore_apps::device::finish_capture(cap)?;
            eprintln!("iwperf: {n} packets captured to {}", cap.display());
        }
    }
    r
}

fn mpa_line(c: &Conn) -> String {
    match &c.est {
        Some(e) => format!(
            "Rev {}/{}, CRC {}, markers {}/{}, IRD {} ORD {}, p2p {}",
            e.rev.0,
            e.rev.1,
            if e.crc { "on" } else { "off" },
            if e.markers.0 { "on" } else { "off" },
            if e.markers.1 { "on" } else { "off" },
            e.ird,
            e.ord,
            match (e.rtr, e.rtr_accepted) {
                (Some(t), _) => format!("{} RTR", rtr_name(t)),
                (None, a) if a != RtrTypes::EMPTY => format!(
                    "{} RTR (responder)",
                    a.iter().map(rtr_name).collect::<Vec<_>>().join("/")
                ),
                _ => "off".into(),
            }
        ),
        None => "?".into(),
    }
}

fn rtr_name(t: RtrType) -> &'static str {
    match t {
        RtrType::Send => "Send",
        RtrType::Write => "Write",
        RtrType::Read => "Read",
    }
}

fn info(ep: &Endpoint, c: &Conn, peer_ip: Ipv4Addr) -> BannerInfo {
    BannerInfo {
        device: ep.device.clone(),
        mtu: ep.mtu,
        mpa: mpa_line(c),
        local: format!(
            "IP {} QPN {:#08x} STag {:#010x} VAddr 0x000000 Len {}",
            ep.ip,
            c.qp.id().qpn(),
            c.data.stag(),
            c.data.len()
        ),
        remote: format!(
            "IP {} STag {:#010x} VAddr 0x000000 Len {}",
            peer_ip, c.peer.data_stag, c.peer.data_len
        ),
    }
}

fn static_pattern(lay: &Layout, salt: u64) -> Vec<u8> {
    if !lay.test.is_read() {
        return Vec::new();
    }
    let mut v = vec![0u8; lay.data_len as usize];
    wire::fill(&mut v, salt, 0);
    v
}

fn hdr_table(test: TestName, outs: &[Outcome]) -> String {
    let mut s = format!(
        " HdrHistogram percentiles [usec], {}\n",
        report::hdr_what(test)
    );
    s += " #bytes        p50        p90        p99      p99.9     p99.99        max    samples\n";
    for o in outs {
        let q = |p: f64| o.hist.value_at_quantile(p) as f64 / 1000.0;
        s += &format!(
            " {:<8} {:>8.2}   {:>8.2}   {:>8.2}   {:>8.2}   {:>8.2}   {:>8.2}   {:>8}\n",
            o.size,
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            q(0.9999),
            o.hist.max() as f64 / 1000.0,
            o.hist.len()
        );
    }
    s.pop();
    s
}

/// The table header of the test (perftest's, in the units asked for).
fn header(cli: &Cli) -> String {
    if cli.test.is_bw() {
        report::bw_header(cli.report_gbits)
    } else if cli.report_cycles {
        report::LAT_HEADER.replace("usec", "cycles")
    } else {
        report::LAT_HEADER.to_string()
    }
}

fn client_role(
    cli: &Cli,
    ep: &Endpoint,
    server: Ipv4Addr,
    mpa: &MpaParams,
) -> Result<Verdict, String> {
    run::drive_on_this_thread(&ep.ctx);
    if cli.events {
        run::use_events(&ep.ctx)?;
    }
    let r = client_run(cli, ep, server, mpa);
    run::stop_events();
    run::stop_driving();
    r
}

fn client_run(
    cli: &Cli,
    ep: &Endpoint,
    server: Ipv4Addr,
    mpa: &MpaParams,
) -> Result<Verdict, String> {
    let test = cli.test;
    let sizes = cli.sizes();
    let max = sizes.iter().copied().max().unwrap_or(2);
    let opts = run::Opts {
        imm: cli.write_with_imm,
        cmp_swap: cli.atomic_type == cli::AtomicType::CmpAndSwap,
        inline: cli.inline_size,
        rx_depth: cli.rx_depth.unwrap_or(0),
    };
    let lay = Layout::new(
        test,
        max,
        u64::from(cli.tx_depth()),
        cli.verify,
        cli.bidir,
        opts,
    );
    let timeout = Duration::from_secs(cli.timeout);
    let mut conns = run::connect(
        &ep.ctx,
        server,
        cli.port,
        mpa,
        lay,
        cli.qps,
        test.index(),
        wire::RunShape {
            size: if cli.all { 0 } else { sizes[0] },
            iters: if cli.phase_duration().is_some() {
                0
            } else {
                cli.iters()
            },
            duration_ns: cli
                .phase_duration()
                .map_or(0, |d| Duration::from_secs_f64(d).as_nanos() as u64),
        },
        timeout,
    )?;
    let bi = info(ep, &conns[0], server);
    // --output prints only the figure asked for, as perftest.
    let full = cli.output.is_none();
    if full {
        warpcore_apps::outln!("{}", report::banner(cli, &bi));
        warpcore_apps::outln!("{}", header(cli));
    }
    let static_peer = static_pattern(&lay, wire::SERVER_SALT);
    let duration = cli.phase_duration();
    let progress = (cli.all || duration.is_some()) && !cli.run_infinitely;
    let cycles = if cli.report_cycles {
        Some(report::cpu_mhz()?)
    } else {
        None
    };
    let mut outs = Vec::new();
    // A phase that measured nothing ends the run (`report::nothing_measured`).
    let mut empty = None;
    let mut sizes = sizes.iter().copied().peekable();
    while let Some(&size) = sizes.peek() {
        let ph = Phase {
            size,
            iters: cli.iters(),
            duration: duration.map(Duration::from_secs_f64),
            // perftest's margins apply to -D, not to --run_infinitely's rows.
            margin: cli
                .duration
                .filter(|_| !cli.run_infinitely && test.is_bw())
                .map_or(Duration::ZERO, |d| match cli.margin {
                    Some(m) => Duration::from_secs(u64::from(m)),
                    None => report::perftest_margin(d),
                }),
            stall: timeout,
            progress,
            hdr_log: cli.hdr_log.is_some(),
            cq_mod: u64::from(cli.cq_mod.unwrap_or(1)),
            post_list: u64::from(cli.post_list.unwrap_or(1)),
        };
        let o = if test.is_bw() {
            tests::bw_phase(
                &mut conns,
                test,
                &ph,
                true,
                true,
                cli.bidir,
                cli.verify,
                &static_peer,
                cli.inject_defect,
            )?
        } else {
            tests::client_lat(
                &mut conns,
                test,
                &ph,
                cli.verify,
                &static_peer,
                cli.inject_defect,
            )?
        };
        if let Some(e) = report::nothing_measured(test, &o) {
            empty = Some(e);
            break;
        }
        if test.is_bw() {
            let (_, avg, rate, _) = report::bw_figures(&o, cli.report_gbits);
            match cli.output {
                Some(cli::OutputKind::Bandwidth) => warpcore_apps::outln!("{avg:.6}"),
                Some(cli::OutputKind::MessageRate) => warpcore_apps::outln!("{rate:.6}"),
                _ => warpcore_apps::outln!("{}", report::bw_row(&o, cli.report_gbits, cli.no_peak)),
            }
        } else {
            let factor = report::rtt_factor(test);
            let scale = cycles.unwrap_or(1.0);
            let units = if cycles.is_some() { "cycles" } else { "usec" };
            if cli.report_unsorted {
                warpcore_apps::out!(
                    "{}",
                    report::samples_listing(&o.samples, factor, scale, units, false)
                );
            }
            if cli.report_histogram || cli.report_unsorted {
                warpcore_apps::out!(
                    "{}",
                    report::samples_listing(&o.samples, factor, scale, units, true)
                );
                if full {
                    warpcore_apps::outln!("{LINE}");
                    warpcore_apps::outln!("{}", header(cli));
                }
            }
            let st = report::outcome_lat_stats(&o, factor, scale);
            match cli.output {
                Some(_) => warpcore_apps::outln!("{}", report::output_latency(st.as_ref())),
                None => warpcore_apps::outln!("{}", report::lat_row(o.size, o.iters, st.as_ref())),
            }
        }
        // --run_infinitely: the one size again and again, a row each -D seconds, until
        // the process is stopped (as perftest). Its rows are printed as they come and only
        // the last is kept: keeping every row's histograms grew the process without bound
        // (--verify and the report files, which come after the last row, are refused).
        if cli.run_infinitely {
            outs.clear();
        } else {
            sizes.next();
        }
        outs.push(o);
    }
    if let Some(e) = empty {
        // No row, no report files: the server is let go as after a whole run.
        say_bye(ep, &mut conns, timeout)?;
        return Err(e);
    }
    if let Some(path) = cli.out_json_path() {
        if let Some(last) = outs.last() {
            report::write_perftest_json(&path, cli, &bi, last, cycles)?;
        }
    }
    if full {
        warpcore_apps::outln!("{LINE}");
        warpcore_apps::outln!("{}", hdr_table(test, &outs));
        warpcore_apps::outln!("{LINE}");
    }
    let (checked, errors) = outs
        .iter()
        .fold((0, 0), |a, o| (a.0 + o.verified, a.1 + o.errors));
    let verdict = if cli.verify {
        let first = outs.iter().find_map(|o| o.first_error);
        let line = verify_line(test, checked, errors, first);
        warpcore_apps::outln!("{line}");
        if line.starts_with("verify: ok") {
            Verdict::Clean
        } else {
            Verdict::VerifyFailed
        }
    } else {
        Verdict::Clean
    };
    say_bye(ep, &mut conns, timeout)?;
    // This side's TCP counters (the retransmissions and timeouts behind a figure).
    let tcp = report::TcpSummary::of(&ep.ctx);
    if full {
        if let Some(t) = &tcp {
            warpcore_apps::outln!("{}", t.line());
        }
    }
    if let Some(p) = &cli.json {
        report::write_json(p, cli, &bi, &outs, tcp.as_ref())?;
    }
    if let Some(p) = &cli.hdr_log {
        report::write_hdr_log(p, cli, &outs)?;
    }
    Ok(verdict)
}

/// Ends the run with the server: its Bye, then every connection closed.
fn say_bye(ep: &Endpoint, conns: &mut [Conn], timeout: Duration) -> Result<(), String> {
    conns[0].send_ctrl(wire::Ctrl::new(wire::Kind::Bye, 0, 0), timeout)?;
    for c in conns.iter() {
        let _ = c.qp.disconnect();
    }
    // Let the Bye and the FINs go out before the engine stops.
    wait_disconnected(&ep.ctx, conns.len());
    Ok(())
}

/// Waits (at most 2 s) until `n` connections reported `Disconnected`.
fn wait_disconnected(ctx: &warpcore_verbs::Context, n: usize) {
    let t0 = std::time::Instant::now();
    let mut closed = 0;
    while closed < n && t0.elapsed() < Duration::from_secs(2) {
        if let Some(warpcore_verbs::CmEvent::Disconnected { .. }) =
            ctx.next_event(Duration::from_millis(100))
        {
            closed += 1;
        }
    }
}

/// The one line `--verify` ends with: `verify: ok, N messages checked` only when something
/// was checked and nothing differed; otherwise `verify: FAILED: <test>: ...` naming the
/// first mismatch (message number and what differed), or saying that nothing was checked.
fn verify_line(test: TestName, checked: u64, errors: u64, first: Option<run::Mismatch>) -> String {
    let t = test.name();
    if errors > 0 {
        match first {
            Some(m) => format!("verify: FAILED: {t}: {m}; {errors} of {checked} checks failed"),
            None => format!(
                "verify: FAILED: {t}: {errors} of {checked} checks failed (no detail reported)"
            ),
        }
    } else if checked == 0 {
        format!("verify: FAILED: {t}: 0 messages checked (--verify checked nothing)")
    } else {
        format!("verify: ok, {checked} messages checked")
    }
}

fn server_role(cli: &Cli, ep: &Endpoint, mpa: &MpaParams, print: bool) -> Result<Verdict, String> {
    run::drive_on_this_thread(&ep.ctx);
    if cli.events {
        run::use_events(&ep.ctx)?;
    }
    let r = server_run(cli, ep, mpa, print);
    run::stop_events();
    run::stop_driving();
    r
}

fn server_run(cli: &Cli, ep: &Endpoint, mpa: &MpaParams, print: bool) -> Result<Verdict, String> {
    if print {
        warpcore_apps::outln!("\n************************************");
        warpcore_apps::outln!("* Waiting for client to connect... *");
        warpcore_apps::outln!("************************************");
    }
    let (mut conns, lay, hello) = run::accept(
        &ep.ctx,
        cli.port,
        mpa,
        cli.test.index(),
        &cli.server_run(),
        None,
    )?;
    let _ = hello;
    let peer_ip = conns[0].peer_ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
    if print {
        warpcore_apps::outln!("{}", report::banner(cli, &info(ep, &conns[0], peer_ip)));
    }
    let test = lay.test;
    let timeout = Duration::from_secs(cli.timeout);
    let (mut phases, mut checked, mut errors) = (0u64, 0u64, 0u64);
    let mut first: Option<run::Mismatch> = None;
    if test.is_bw() {
        let static_peer = static_pattern(&lay, wire::CLIENT_SALT);
        loop {
            let start = match conns[0].wait_ctrl(Duration::from_secs(24 * 3600)) {
                Ok(x) if x.kind == wire::Kind::Bye => break,
                Ok(x) => x,
                Err(e) if e.contains("closed") => break,
                Err(e) => return Err(e),
            };
            if start.kind != wire::Kind::Start {
                return Err(format!("expected Start, got {:?}", start.kind));
            }
            lay.check_start_size(start.size)?;
            let ph = Phase {
                cq_mod: 1,
                post_list: 1,
                size: start.size,
                iters: start.iters,
                duration: (start.duration_ns > 0).then(|| Duration::from_nanos(start.duration_ns)),
                margin: Duration::from_nanos(start.v0),
                stall: timeout,
                progress: false,
                hdr_log: false,
            };
            let o = tests::bw_phase(
                &mut conns,
                test,
                &ph,
                false,
                lay.bidir,
                true,
                lay.verify,
                &static_peer,
                None,
            )?;
            phases += 1;
            checked += o.verified;
            errors += o.errors;
            first = first.or(o.first_error);
        }
    } else {
        phases = tests::server_lat(&mut conns, test, lay.verify)?;
        checked = conns[0].verified;
        errors = conns[0].errors;
        first = conns[0].first_error;
    }
    for c in &conns {
        let _ = c.qp.disconnect();
    }
    // Both FINs exchanged before this side stops polling (as the client waits): the engine
    // then lingers before closing its port (net_memif, `MEMIF_LINGER_MS`), by which time
    // the client, which saw its Disconnected within a round trip, stopped polling too.
    wait_disconnected(&ep.ctx, conns.len());
    if print {
        warpcore_apps::outln!(
            " Served {phases} size(s) of {}{}",
            test.name(),
            if lay.verify && test.is_bw() {
                format!("; verified {checked} messages here, {errors} mismatches")
            } else {
                String::new()
            }
        );
        warpcore_apps::outln!("{LINE}");
    }
    // The checks made here failed: this side exits with 3 as well (the client printed the
    // same first mismatch, which it was sent). Nothing checked here is no failure of its
    // own: in read tests the client does all the checking.
    if lay.verify && errors > 0 {
        if print {
            warpcore_apps::outln!("{}", verify_line(test, checked, errors, first));
        }
        return Ok(Verdict::VerifyFailed);
    }
    Ok(Verdict::Clean)
}
