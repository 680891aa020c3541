//! `iwperf` end to end over `--loopback=link` (two engines in one process over the in-memory
//! link, no DPDK): option parsing, perftest's table layout, the HdrHistogram block, data
//! verification (and planted defects it must catch), `--json` and `--hdr-log`, and the
//! refusals users must see.

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
        assert!(checked(&out) >= 20, "{out}");
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
        assert!(checked(&out) > 0, "{out}");
        let j = std::fs::read_to_string(&json).expect("json written");
        let doc: serde_json::Value = serde_json::from_str(&j).expect("json parses");
        let bw = &doc["results"][0]["bw"];
        // The peak is a measured window's rate (it may be below the average: see the
        // report unit tests) or, for a run shorter than one window, n/a in the table and
        // null in the JSON; the table shows the JSON's figure.
        let javg = bw["average"].as_f64().unwrap();
        assert!(javg > 0.0, "{bw}");
        match bw["peak"].as_f64() {
            Some(p) => {
                assert!(p > 0.0, "{bw}");
                assert_eq!(row[2], format!("{p:.2}"), "{row:?} {bw}");
            }
            None => {
                assert!(bw["peak"].is_null(), "{bw}");
                assert_eq!(row[2], "n/a", "{row:?}");
            }
        }
        assert_eq!(row[3], format!("{javg:.2}"), "{row:?} {bw}");
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

/// The count of a clean `--verify` run's closing line, `verify: ok, N messages checked`.
fn checked(out: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("verify: "))
        .unwrap_or_else(|| panic!("no verify line: {out}"));
    line.strip_prefix("verify: ok, ")
        .and_then(|s| s.strip_suffix(" messages checked"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a clean verify line: {line}"))
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
        assert!(checked(&out) > 0, "{mode}: {out}");
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
        assert!(checked(&out) > 0, "{p2p}: {out}");
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

/// The one `verify: FAILED:` line of a run that must fail verification (exit status 3).
fn verify_failure(args: &[&str]) -> String {
    let o = iwperf(args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{args:?}: {out}\n{err}");
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("verify: FAILED: "))
        .collect();
    assert_eq!(failed.len(), 1, "{args:?}: {out}");
    assert!(!out.contains("verify: ok"), "{out}");
    failed[0].to_string()
}

#[test]
fn clean_verified_runs_pass_with_a_count() {
    for args in [
        vec!["write_bw", "-s", "4096", "-n", "100"],
        vec!["send_bw", "-s", "4096", "-n", "100"],
        vec!["send_lat", "-s", "64", "-n", "20"],
    ] {
        let mut a = args.clone();
        a.extend(["--loopback=link", "--verify"]);
        let o = iwperf(&a);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{a:?}: {out}\n{err}");
        assert!(!out.contains("verify: FAILED"), "{out}");
        // write_bw -n 100 with 128 slots: every Write is its slot's last and is checked;
        // send_bw checks every Send; send_lat every message both ways.
        let want = if args[0] == "send_lat" { 40 } else { 100 };
        assert_eq!(checked(&out), want, "{a:?}: {out}");
    }
}

#[test]
fn a_corrupted_octet_fails_verification_naming_the_message() {
    // write_bw: 100 Writes into 128 slots, so message 3 is the last in its slot and the
    // server's check names it; send_bw: every Send is checked on arrival.
    for test in ["write_bw", "send_bw"] {
        let line = verify_failure(&[
            test,
            "--loopback=link",
            "-s",
            "4096",
            "-n",
            "100",
            "--verify",
            "--inject-defect",
            "corrupt-octet",
        ]);
        assert!(
            line.starts_with(&format!(
                "verify: FAILED: {test}: message 3 (4096 octets): octet 7 is "
            )),
            "{line}"
        );
        assert!(line.contains("1 of "), "{line}");
    }
    // write_bw with more messages than slots: the defect goes into the last message of
    // message 3's slot (8 slots, 40 messages: 3, 11, 19, 27, 35), which the check names.
    let line = verify_failure(&[
        "write_bw",
        "--loopback=link",
        "-s",
        "4096",
        "-n",
        "40",
        "-t",
        "8",
        "--verify",
        "--inject-defect",
        "corrupt-octet",
    ]);
    assert!(
        line.contains("message 35 (4096 octets): octet 7 is "),
        "{line}"
    );
    // Latency tests check each message on arrival.
    for test in ["write_lat", "send_lat"] {
        let line = verify_failure(&[
            test,
            "--loopback=link",
            "-s",
            "64",
            "-n",
            "10",
            "--verify",
            "--inject-defect",
            "corrupt-octet",
        ]);
        assert!(
            line.contains("message 3 (64 octets): octet 7 is "),
            "{line}"
        );
    }
}

#[test]
fn a_short_send_fails_verification_naming_the_length() {
    for (test, size) in [("send_bw", "4096"), ("send_lat", "64")] {
        let line = verify_failure(&[
            test,
            "--loopback=link",
            "-s",
            size,
            "-n",
            "10",
            "--verify",
            "--inject-defect",
            "short-send",
        ]);
        let want = size.parse::<u64>().unwrap();
        assert!(
            line.contains(&format!(
                "message 3: received length {} octets, expected {want}",
                want - 1
            )),
            "{line}"
        );
    }
}

#[test]
fn defects_and_perftest_refuse_what_they_cannot_do() {
    for (args, want) in [
        (
            vec!["send_bw", "--inject-defect", "short-send"],
            "give --verify",
        ),
        (
            vec!["write_bw", "--verify", "--inject-defect", "short-send"],
            "short-send applies to send_lat and send_bw",
        ),
        (
            vec!["read_bw", "--verify", "--inject-defect", "corrupt-octet"],
            "corrupt-octet applies to write and send tests",
        ),
        (
            vec![
                "send_bw",
                "--verify",
                "-n",
                "3",
                "--inject-defect",
                "short-send",
            ],
            "give -n 4 or more",
        ),
        (
            vec![
                "write_bw",
                "--verify",
                "-D",
                "1",
                "--inject-defect",
                "corrupt-octet",
            ],
            "no -a or -D",
        ),
    ] {
        let mut a = args.clone();
        a.push("--loopback=link");
        let o = iwperf(&a);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {out}\n{err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
    // The server side cannot plant a defect: it is the client's (sending side's) option.
    let o = iwperf(&["send_bw", "--verify", "--inject-defect", "short-send"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("give it to the client"),
        "{}",
        text(&o).1
    );
    // --perftest names each option it cannot honour instead of ignoring it.
    for (extra, opt) in [
        (vec!["--verify"], "--verify"),
        (vec!["-b"], "-b"),
        (vec!["-q", "2"], "-q"),
        (vec!["-t", "16"], "-t 16"),
        (vec!["-D", "2"], "-D"),
        (vec!["-a"], "-a"),
        (vec!["-I", "64"], "-I"),
        (vec!["--write_with_imm"], "--write_with_imm"),
        (vec!["--report_gbits"], "--report_gbits"),
        (vec!["--json", "/tmp/iwperf-refused.json"], "--json"),
        (vec!["--hdr-log", "/tmp/iwperf-refused.hlog"], "--hdr-log"),
        (vec!["--loopback"], "--loopback"),
    ] {
        // -a runs every size in write/read tests; the send tests' 64 KiB receive slots
        // cannot take perftest's sizes up to 8 MiB.
        let test = if opt == "-a" { "send_bw" } else { "write_bw" };
        let mut a = vec![test, "--perftest"];
        a.extend(extra);
        let o = iwperf(&a);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {out}\n{err}");
        assert!(
            err.contains(&format!("--perftest cannot honour {opt}: ")),
            "{a:?}: {err}"
        );
    }
}
