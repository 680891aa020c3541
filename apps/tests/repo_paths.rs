//! The repository is whole on its own (issue 14): no tracked file names an absolute path of
//! somebody's machine (a home or work directory, or the siw rig's former place beside the
//! checkout). The check is `scripts/check-paths.sh`, run here over the checkout, and over a
//! scratch git work tree with planted lines to show its matcher catches what it must and
//! leaves system paths and relative paths alone.
//!
//! The forbidden paths are built at run time from their parts, so this file does not trip
//! the check itself.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("apps/ has a parent")
        .to_path_buf()
}

/// Runs the check on `dir`; returns its exit status and stdout.
fn check_paths(dir: &Path) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/check-paths.sh"))
        .arg(dir)
        .output()
        .expect("run scripts/check-paths.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory outside the checkout (under the system temporary directory, so that no
/// enclosing git work tree is found from it).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "warpcore-check-paths-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(st.success(), "git {args:?} failed");
}

#[test]
fn tracked_files_name_no_machine_path() {
    let (code, out, err) = check_paths(&repo_root());
    assert_eq!(
        code, 0,
        "machine paths in tracked files (use paths relative to the checkout):\n{out}{err}"
    );
    assert!(out.contains("no machine path"), "{out}");
}

/// One planted line per case; `true` where the check must report it.
fn planted_cases() -> Vec<(String, bool)> {
    let abs = |top: &str, rest: &str| format!("/{top}/{rest}");
    let outside = format!("../{}/{}/pcaps", "shared", "interop");
    vec![
        // Absolute home and work paths, after whatever may precede a path in a script/doc.
        (format!("cd {}", abs("work", "shared/x")), true),
        (format!("HOME={}", abs("home", "me/.cargo")), true),
        (format!("PATH=\"{}\"", abs("root", ".cargo/bin")), true),
        (format!("(see {})", abs("check", "wt/rig")), true),
        (abs("Users", "me/src/warpcore"), true),
        (format!("x:{}", abs("work", "a")), true),
        (format!("`{}`", abs("home", "u/x.pcap")), true),
        // The rig's former place beside the checkout, relative or not.
        (outside.clone(), true),
        (
            format!("SIWVM={}", outside.replace("pcaps", "siw-vm")),
            true,
        ),
        // System paths are allowed.
        ("W=${SIWVM_DIR:-/var/tmp/siw-vm}".to_string(), false),
        ("mktemp -d /tmp/x.XXXX".to_string(), false),
        ("[ -c /dev/net/tun ]".to_string(), false),
        ("/usr/bin/tshark -r f".to_string(), false),
        ("cp /etc/passwd .".to_string(), false),
        ("[ -d /sys/module/kvm_pvm ]".to_string(), false),
        ("cat /proc/cmdline".to_string(), false),
        ("ls /run/netns".to_string(), false),
        // Relative paths that merely contain a forbidden name are not absolute.
        ("apps/work/notes".to_string(), false),
        (
            format!("ROOT=$W{}", abs("root", "").trim_end_matches('/')),
            false,
        ),
        (format!("mkdir -p \"${{ROOT}}{}\"", abs("root", "x")), false),
        (format!("see .{}", abs("home", "x")), false),
        (format!("https://example.com{}", abs("home", "x")), false),
        // The guest's own home directory, not a path on any machine's disk.
        (
            format!("export HOME={}", abs("root", "").trim_end_matches('/')),
            false,
        ),
    ]
}

/// Planted defects: a scratch git work tree holding one text file with every case, one
/// binary file with a forbidden path inside (binary files such as captures are not read) and
/// one untracked file (only tracked files count). The check must fail and name exactly the
/// lines that must be caught.
#[test]
fn planted_machine_paths_are_caught_and_system_paths_are_not() {
    let dir = scratch("planted");
    git(&dir, &["init", "-q"]);

    let cases = planted_cases();
    let text: String = cases.iter().map(|(l, _)| format!("{l}\n")).collect();
    std::fs::write(dir.join("planted.sh"), text).unwrap();
    let mut binary = vec![0u8, 1, 2, 0];
    binary.extend_from_slice(format!("cd /{}/x\n", "work").as_bytes());
    std::fs::write(dir.join("capture.pcap"), binary).unwrap();
    git(&dir, &["add", "planted.sh", "capture.pcap"]);
    std::fs::write(dir.join("untracked.txt"), format!("/{}/u/x\n", "home")).unwrap();

    let (code, out, err) = check_paths(&dir);
    assert_eq!(
        code, 1,
        "the planted paths must fail the check:\n{out}{err}"
    );
    let mut reported: Vec<usize> = out
        .lines()
        .map(|l| {
            let rest = l
                .strip_prefix("planted.sh:")
                .unwrap_or_else(|| panic!("reported a line outside planted.sh: {l}"));
            rest.split(':').next().unwrap().parse().unwrap()
        })
        .collect();
    reported.sort_unstable();
    let expected: Vec<usize> = cases
        .iter()
        .enumerate()
        .filter(|(_, (_, bad))| *bad)
        .map(|(i, _)| i + 1)
        .collect();
    let describe = |lines: &[usize]| -> Vec<String> {
        lines.iter().map(|&n| cases[n - 1].0.clone()).collect()
    };
    assert_eq!(
        describe(&reported),
        describe(&expected),
        "reported lines differ from the planted ones"
    );
    assert!(err.contains("FAILED"), "{err}");

    // With the planted lines gone the same tree passes.
    let allowed: String = cases
        .iter()
        .filter(|(_, bad)| !bad)
        .map(|(l, _)| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("planted.sh"), allowed).unwrap();
    let (code, out, err) = check_paths(&dir);
    assert_eq!(code, 0, "only allowed paths left:\n{out}{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory that is not the top of a git work tree is an error (exit 2), not a pass: a
/// plain directory, and a subdirectory of the checkout (where `git ls-files` would list only
/// part of the tree).
#[test]
fn outside_a_work_tree_the_check_refuses() {
    let dir = scratch("no-git");
    let (code, out, err) = check_paths(&dir);
    assert_eq!(code, 2, "{out}{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = check_paths(&repo_root().join("apps"));
    assert_eq!(code, 2, "{out}{err}");
}

/// A tracked file the check cannot read (deleted from the work tree, still tracked) fails
/// it: grep's error status was folded by xargs into the "nothing matched" one and thrown
/// away with its message, so the check said ok over a file it never read.
#[test]
fn a_tracked_file_that_cannot_be_read_fails_the_check() {
    let dir = scratch("unreadable");
    git(&dir, &["init", "-q"]);
    std::fs::write(dir.join("a.sh"), "echo fine\n").unwrap();
    std::fs::write(dir.join("gone.sh"), "echo fine\n").unwrap();
    git(&dir, &["add", "a.sh", "gone.sh"]);
    let (code, out, err) = check_paths(&dir);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::remove_file(dir.join("gone.sh")).unwrap();
    let (code, out, err) = check_paths(&dir);
    assert_eq!(
        code, 1,
        "a tracked file it could not read passed:\n{out}{err}"
    );
    assert!(err.contains("could not read every tracked file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
