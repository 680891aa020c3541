//! Writes the inert entry points of the provider stand-ins (`stubs.s`) and their version
//! script from the committed symbol tables (`*.symbols`, made by `gen-symbols.py` from
//! Debian's libraries and headers).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let mut asm = String::new();
    let mut nodes: Vec<(String, BTreeSet<String>)> = Vec::new();
    for lib in ["mlx5", "mlx4", "efa"] {
        let path = dir.join(format!("{lib}.symbols"));
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path).expect("reading a symbol table");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [name, ver, kind] = f[..] else {
                panic!("{}: bad line {line:?}", path.display())
            };
            if !nodes.iter().any(|(n, _)| n == ver) {
                nodes.push((ver.to_string(), BTreeSet::new()));
            }
            let stub = format!("__wc_stand_in_{name}");
            // Every entry point sets errno to EOPNOTSUPP (95) and returns "unsupported" in
            // the form its prototype has: NULL, false, EOPNOTSUPP, or nothing.
            let ret = match kind {
                "ptr" | "bool" | "void" => "xorl %eax, %eax",
                "int" => "movl $95, %eax",
                k => panic!("{}: unknown kind {k}", path.display()),
            };
            let _ = write!(
                asm,
                ".globl {stub}\n.type {stub},@function\n{stub}:\n\tsubq $8, %rsp\n\t\
                 call __errno_location@PLT\n\tmovl $95, (%rax)\n\taddq $8, %rsp\n\t{ret}\n\tret\n\
                 .size {stub}, .-{stub}\n.symver {stub}, {name}@@{ver}\n"
            );
        }
    }
    // Version nodes in the order the tables list them, each depending on the one before
    // within its library (as rdma-core's maps chain them).
    let mut map = String::new();
    let mut prev: Option<String> = None;
    for (n, _) in &nodes {
        let lib = n.split('_').next().unwrap_or("");
        match &prev {
            Some(p) if p.split('_').next() == Some(lib) => {
                let _ = writeln!(map, "{n} {{ }} {p};");
            }
            _ => {
                let _ = writeln!(map, "{n} {{ }};");
            }
        }
        prev = Some(n.clone());
    }
    std::fs::write(out.join("stubs.s"), asm).expect("writing stubs.s");
    std::fs::write(out.join("stand-ins.map"), map).expect("writing the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.join("stand-ins.map").display()
    );
}
