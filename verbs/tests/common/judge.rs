//! Judging a pcapng capture of an engine run: `iwdump`'s library (no protocol violation, no
//! bad CRC, no malformed segment) and `tshark --disable-protocol rpcordma` (no malformed
//! frame, no expert error, every CRC it checks is good).

use std::path::Path;
use std::process::Command;

pub fn judge_capture(path: &Path) {
    // DPDK 22.11's rte_pcapng writes block options the pcap-file crate behind iwdump refuses
    // ("Invalid option"); editcap rewrites the same packets as classic pcap for it.
    let pcap = path.with_extension("pcap");
    let converted = Command::new("editcap")
        .args(["-F", "pcap"])
        .arg(path)
        .arg(&pcap)
        .status()
        .is_ok_and(|s| s.success());
    let for_iwdump = if converted { pcap.as_path() } else { path };
    let cap = warpcore_apps::capture::read_capture_file(for_iwdump).expect("read capture");
    let report = warpcore_apps::report::analyse_capture("engine", &cap);
    let text = warpcore_apps::report::render_text(&report, false);
    assert_eq!(report.violations(), 0, "iwdump found violations:\n{text}");
    let conns: Vec<_> = report.iwarp().collect();
    assert!(
        !conns.is_empty(),
        "no iWARP connection in the capture:\n{text}"
    );
    let mut crc_fpdus = 0;
    for c in &conns {
        for d in &c.directions {
            assert_eq!(d.crc_errors, 0, "bad CRC:\n{text}");
            assert_eq!(d.malformed_segments, 0, "malformed segment:\n{text}");
            assert_eq!(d.marker_errors, 0, "marker error:\n{text}");
        }
        if c.negotiated.as_ref().is_some_and(|n| n.crc) {
            crc_fpdus += 1;
        }
    }
    assert!(crc_fpdus > 0, "no connection with CRCs:\n{text}");
    if Command::new("tshark").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("WARPCORE_REQUIRE_TSHARK").is_none(),
            "tshark is required (WARPCORE_REQUIRE_TSHARK is set) but not installed"
        );
        eprintln!("SKIPPED tshark check: tshark not installed");
        return;
    }
    let tshark = |args: &[&str]| -> String {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(path)
            .args(["--disable-protocol", "rpcordma"])
            .args(args)
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let malformed = tshark(&["-Y", "_ws.malformed"]);
    assert!(
        malformed.trim().is_empty(),
        "tshark: malformed frames in {}:\n{malformed}",
        path.display()
    );
    let verbose = tshark(&["-V"]);
    assert!(
        !verbose.contains("Bad CRC32"),
        "tshark: bad CRC in {}",
        path.display()
    );
    let fpdus = tshark(&[
        "-Y",
        "iwarp_mpa.ulpdulength",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]);
    assert!(
        fpdus.lines().count() > 10,
        "tshark dissected too few FPDUs in {}",
        path.display()
    );
}

/// iwdump's report (named `name`) of the pcapng capture at `path`, rewritten as classic
/// pcap by editcap first (see [`judge_capture`]); editcap must succeed.
pub fn iwdump_report(path: &Path, name: &str) -> warpcore_apps::report::CaptureReport {
    let pcap = path.with_extension("pcap");
    assert!(Command::new("editcap")
        .args(["-F", "pcap"])
        .arg(path)
        .arg(&pcap)
        .status()
        .is_ok_and(|s| s.success()));
    let cap = warpcore_apps::capture::read_capture_file(&pcap).expect("read capture");
    warpcore_apps::report::analyse_capture(name, &cap)
}
