//! `iwperf` end to end over `--loopback=link` (two engines in one process over the in-memory
//! link, no DPDK): option parsing, perftest's table layout, the HdrHistogram block, data
//! verification, `--json` and `--hdr-log`, and the refusals users must see.

use std::path::PathBuf;
use std::process::{Command, Output};

fn iwperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iwperf"))
        .args(args)
        .output()
        .expect("run iwperf")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iwperf-test-{}-{name}", std::process::id()))
}

/// The row under a header line, split into columns.
fn row_after<'a>(out: &'a str, header_start: &str) -> Vec<&'a str> {
    let mut lines = out.lines();
    lines.find(|l| l.starts_with(header_start)).expect("header");
    lines.next().expect("row").split_whitespace().collect()
}

#[test]
fn latency_tests_print_perftest_table_and_histogram_with_verification() {
    for test in ["write_lat", "read_lat", "send_lat"] {
        let o = iwperf(&[test, "--loopback=link", "-s", "100", "-n", "20", "--verify"]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{test}: {out}\n{err}");
        assert!(out.contains(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "), "{out}");
        let row = row_after(&out, " #bytes #iterations");
        assert_eq!(row.len(), 9, "{row:?}");
        assert_eq!(row[..2], ["100", "20"]);
        let v: Vec<f64> = row[2..]
            .iter()
            .map(|x| x.parse().expect("number"))
            .collect();
        // t_min <= t_typical <= t_max, and the percentiles lie between min and max.
        assert!(
            v[0] <= v[2] && v[2] <= v[1] && v[5] <= v[1] && v[6] <= v[1],
            "{v:?}"
        );
        let hdr = row_after(&out, " #bytes        p50");
        assert_eq!(hdr.len(), 8, "{hdr:?}");
        assert_eq!(hdr[7], "20");
        assert!(out.contains("0 mismatches"), "{out}");
        let checked: u64 = out
            .split(" Data verification: ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .expect("verification line");
        assert!(checked >= 20, "{out}");
    }
}

#[test]
fn bandwidth_tests_print_perftest_table_json_and_hdr_log() {
    let json = tmp("bw.json");
    let log = tmp("bw.hlog");
    for (test, extra) in [
        ("write_bw", vec![]),
        ("read_bw", vec![]),
        ("send_bw", vec!["-b"]),
    ] {
        let mut args = vec![
            test,
            "--loopback=link",
            "-s",
            "4096",
            "-n",
            "200",
            "-t",
            "16",
            "--verify",
            "--report_gbits",
            "--json",
            json.to_str().unwrap(),
            "--hdr-log",
            log.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = iwperf(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{test}: {out}\n{err}");
        assert!(
            out.contains(
                " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
            ),
            "{out}"
        );
        let row = row_after(&out, " #bytes     #iterations");
        assert_eq!(row.len(), 5, "{row:?}");
        assert_eq!(row[0], "4096");
        let (peak, avg): (f64, f64) = (row[2].parse().unwrap(), row[3].parse().unwrap());
        // The table prints two decimals, so a run slowed down by a loaded machine may print
        // an average of 0.00 Gb/s; the JSON carries the unrounded figure.
        assert!(peak >= avg, "{row:?}");
        assert!(out.contains("0 mismatches"), "{out}");
        let j = std::fs::read_to_string(&json).expect("json written");
        let doc: serde_json::Value = serde_json::from_str(&j).expect("json parses");
        let bw = &doc["results"][0]["bw"];
        let (jpeak, javg) = (
            bw["peak"].as_f64().unwrap(),
            bw["average"].as_f64().unwrap(),
        );
        assert!(javg > 0.0 && jpeak >= javg, "{bw}");
        assert!(j.contains(&format!("\"test\": \"{test}\"")), "{j}");
        assert!(j.contains("\"msg_rate_mpps\""), "{j}");
        let l = std::fs::read_to_string(&log).expect("hdr log written");
        assert!(l.contains("#[BaseTime:"), "{l}");
        assert!(l.contains(&format!("Tag={test}-4096,")), "{l}");
    }
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(log);
}

#[test]
fn all_sizes_run_in_order() {
    // -a runs 2 B .. 8 MiB; keep it short with few iterations on the small link.
    let o = iwperf(&["write_lat", "--loopback=link", "-a", "-n", "3"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let sizes: Vec<u64> = out
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes #iterations"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(sizes, (1..=23).map(|e| 1u64 << e).collect::<Vec<_>>());
}

#[test]
fn refusals_are_clear_and_non_zero() {
    for (args, want) in [
        (
            vec!["atomic_lat", "-s", "16", "--loopback=link"],
            "-s 8 only",
        ),
        (vec!["atomic_bw", "-a", "--loopback=link"], "-s 8 only"),
        (
            vec!["read_lat", "--write_with_imm", "--loopback=link"],
            "applies to write_lat and write_bw",
        ),
        (
            vec!["read_bw", "-I", "64", "--loopback=link"],
            "-I applies to write and send tests",
        ),
        (
            vec!["write_lat", "-I", "9000", "--loopback=link"],
            "at most 4096",
        ),
        (
            vec!["atomic_lat", "-A", "SWAP", "--loopback=link"],
            "invalid value",
        ),
        (vec!["write_lat", "-q", "2", "--loopback=link"], "one QP"),
        (
            vec!["write_lat", "-b", "--loopback=link"],
            "bandwidth tests",
        ),
        (
            vec![
                "write_bw",
                "--p2p",
                "send",
                "--mpa-rev",
                "1",
                "--loopback=link",
            ],
            "needs --mpa-rev 2",
        ),
        (
            vec!["write_lat", "--cores", "x", "--loopback=link"],
            "bad CPU list",
        ),
        (
            vec!["write_lat", "--loopback=link", "--capture", "/tmp/x.pcapng"],
            "DPDK",
        ),
        (vec!["nonsense_lat"], "invalid value"),
    ] {
        let o = iwperf(&args);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded: {out}");
        assert!(
            err.to_lowercase().contains(&want.to_lowercase()),
            "{args:?}: {err}"
        );
    }
}

/// The verification count of a run's output.
fn checked(out: &str) -> u64 {
    out.split(" Data verification: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("verification line")
}

#[test]
fn atomics_return_every_counter_value_and_leave_the_sum() {
    // Each atomic's original value (completion and 8-octet sink) is checked, then the
    // server checks its counter word: 2 checks per atomic plus 1 per QP.
    for (test, ty, extra, checks) in [
        ("atomic_lat", "FETCH_AND_ADD", vec![], 2 * 30 + 1),
        ("atomic_lat", "CMP_AND_SWAP", vec![], 2 * 30 + 1),
        (
            "atomic_bw",
            "FETCH_AND_ADD",
            vec!["-q", "2"],
            2 * 2 * 30 + 2,
        ),
        ("atomic_bw", "CMP_AND_SWAP", vec!["-t", "8"], 2 * 30 + 1),
    ] {
        let mut args = vec![test, "--loopback=link", "-A", ty, "-n", "30", "--verify"];
        args.extend(extra);
        let o = iwperf(&args);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {out}\n{err}");
        assert!(out.contains(" Atomic type     : "), "{out}");
        assert!(out.contains(ty), "{out}");
        assert!(out.contains(" 0 mismatches"), "{args:?}: {out}");
        assert_eq!(checked(&out), checks, "{args:?}: {out}");
        let first = if test == "atomic_lat" {
            row_after(&out, " #bytes #iterations")
        } else {
            row_after(&out, " #bytes     #iterations")
        };
        assert_eq!(first[0], "8", "{first:?}");
    }
}

#[test]
fn write_with_immediate_and_inline_runs_verify() {
    for args in [
        vec!["write_lat", "--write_with_imm", "-s", "100", "-n", "30"],
        vec![
            "write_bw",
            "--write_with_imm",
            "-s",
            "2048",
            "-n",
            "300",
            "-b",
        ],
        vec!["write_lat", "-I", "128", "-s", "64", "-n", "30"],
        vec!["send_lat", "-I", "128", "-s", "100", "-n", "30"],
        vec!["send_bw", "-I", "256", "-s", "256", "-n", "300"],
        vec![
            "write_bw",
            "-I",
            "64",
            "--write_with_imm",
            "-s",
            "64",
            "-n",
            "300",
        ],
    ] {
        let mut a = args.clone();
        a.extend(["--loopback=link", "--verify"]);
        let o = iwperf(&a);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{a:?}: {out}\n{err}");
        assert!(out.contains(" 0 mismatches"), "{a:?}: {out}");
        assert!(checked(&out) > 0, "{a:?}: {out}");
        if let Some(i) = a.iter().position(|x| *x == "-I") {
            assert!(
                out.contains(&format!(" Max inline data : {}[B]", a[i + 1])),
                "{out}"
            );
        }
    }
}

#[test]
fn poll_modes_all_run() {
    for mode in ["caller", "busy", "thread"] {
        let o = iwperf(&[
            "write_lat",
            "--loopback=link",
            "--poll-mode",
            mode,
            "-n",
            "20",
            "--verify",
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{mode}: {out}\n{err}");
        assert!(out.contains(" 0 mismatches"), "{mode}: {out}");
        assert!(out.contains(&format!(" Poll mode       : {mode}")), "{out}");
    }
}

#[test]
fn every_rtr_type_connects_and_runs() {
    // RFC 6581: the client offers the one RTR type asked for and sends it first; the
    // server accepts all three. `none`: no peer-to-peer negotiation.
    for (p2p, want) in [
        ("none", "p2p off"),
        ("write", "p2p Write RTR"),
        ("send", "p2p Send RTR"),
        ("read", "p2p Read RTR"),
    ] {
        let o = iwperf(&[
            "send_lat",
            "--loopback=link",
            "--p2p",
            p2p,
            "-n",
            "20",
            "--verify",
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{p2p}: {out}\n{err}");
        assert!(out.contains(want), "{p2p}: {out}");
        assert!(out.contains(" 0 mismatches"), "{p2p}: {out}");
    }
}

#[test]
fn mpa_options_reach_the_wire_negotiation() {
    let o = iwperf(&[
        "send_lat",
        "--loopback=link",
        "-n",
        "5",
        "--mpa-rev",
        "1",
        "--crc",
        "off",
        "--markers",
        "on",
        "--p2p",
        "none",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("MPA             : Rev 1/1, CRC off, markers on/on"),
        "{out}"
    );
}
