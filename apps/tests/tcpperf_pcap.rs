//! tcpperf's `--pcap` (the stack-side capture, `warpcore_tcp::Capture`): a run writes a
//! capture every frame of which is read back, and a capture whose writes fail is reported
//! as a failed run naming the file, never left looking complete.

use std::path::Path;
use std::process::Command;

use warpcore_apps::capture::read_capture_file;

/// `tcpperf memory` with a 256 KiB bulk test, capturing to `pcap`: exit status and output.
fn memory_run(pcap: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpperf"))
        .args([
            "memory", "--test", "bulk", "--bytes", "262144", "--pcap", pcap,
        ])
        .output()
        .expect("run tcpperf");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_pcap_capture_holds_every_frame_and_one_that_could_not_be_written_fails_the_run() {
    let dir = std::env::temp_dir().join(format!("wc_tcpperf_pcap_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("a.pcap");
    let (rc, text) = memory_run(file.to_str().expect("a UTF-8 path"));
    assert_eq!(rc, 0, "{text}");
    let cap = read_capture_file(&file).expect("tcpperf's capture reads back");
    assert!(cap.warnings.is_empty(), "{:?}", cap.warnings);
    // 256 KiB in 1448-octet segments, plus the handshake, ACKs and ARP.
    assert!(cap.frames.len() > 181, "{} frames", cap.frames.len());
    assert!(
        text.contains(&format!("{} frames captured to", cap.frames.len())),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");

    // Every write to /dev/full fails (ENOSPC): the run used to end with status 0 and an
    // empty file.
    assert!(Path::new("/dev/full").exists(), "this test needs /dev/full");
    let (rc, text) = memory_run("/dev/full");
    assert_eq!(rc, 1, "{text}");
    assert!(text.contains("--pcap /dev/full"), "{text}");
    assert!(text.contains("writes failed"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}
