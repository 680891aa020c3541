//! iwping's command line: rping's options are accepted with rping's limits, and a run that
//! cannot start says why with exit status 2 (usage) before touching any device. The exchange
//! itself is checked against Linux siw by scripts/interop-siw.sh (root, QEMU).

use std::process::Command;

fn iwping(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_iwping"))
        .args(args)
        .output()
        .expect("run iwping");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_role_is_required() {
    let (rc, text) = iwping(&["-C", "1"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("-s") && text.contains("-c"), "{text}");
}

#[test]
fn client_needs_server_and_own_address() {
    let (rc, text) = iwping(&["-c", "--ip", "198.18.0.2/24"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("-a ADDR"), "{text}");
    let (rc, text) = iwping(&["-c", "-a", "198.18.0.11"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("--ip"), "{text}");
}

#[test]
fn size_limits_are_rpings() {
    // rping: RPING_MIN_BUFSIZE (26) ..= RPING_BUFSIZE - 1.
    for bad in ["25", "65536"] {
        let (rc, text) = iwping(&["-s", "-a", "198.18.0.2", "-S", bad]);
        assert_eq!(rc, 2, "-S {bad}: {text}");
    }
}

#[test]
fn p2p_needs_rev_2_and_no_device_is_a_clear_error() {
    let (rc, text) = iwping(&[
        "-c",
        "-a",
        "198.18.0.11",
        "--ip",
        "198.18.0.2/24",
        "--p2p",
        "--mpa-rev",
        "1",
    ]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("--p2p needs --mpa-rev 2"), "{text}");
    let (rc, text) = iwping(&["-s", "-a", "198.18.0.2"]);
    assert_eq!(rc, 1, "{text}");
    assert!(text.contains("no device"), "{text}");
}
