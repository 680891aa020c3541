//! Writes librdmacm.so.1's entry points (`rdmacm.s`: one jump each into the `__wc_rdma_*`
//! function of Warpcore's libibverbs.so.1) and its version script from `rdmacm.symbols`.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let table = dir.join("rdmacm.symbols");
    println!("cargo:rerun-if-changed={}", table.display());
    let text = std::fs::read_to_string(&table).expect("reading rdmacm.symbols");
    let mut asm = String::new();
    let mut nodes: Vec<String> = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, ver] = f[..] else {
            panic!("rdmacm.symbols: bad line {line:?}")
        };
        if !nodes.iter().any(|n| n == ver) {
            nodes.push(ver.to_string());
        }
        // A tail jump keeps every argument register and the caller's return address: the
        // entry point needs no knowledge of the signature.
        let _ = write!(
            asm,
            ".globl __rdmacm_{name}\n.type __rdmacm_{name},@function\n__rdmacm_{name}:\n\t\
             jmp __wc_{name}@PLT\n.size __rdmacm_{name}, .-__rdmacm_{name}\n\
             .symver __rdmacm_{name}, {name}@@{ver}\n"
        );
    }
    // RDMACM_1.0 .. 1.3 as Debian's library declares them, each depending on the last.
    let mut map = String::from("RDMACM_1.0 { };\n");
    for (prev, n) in ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2"].iter().zip([
        "RDMACM_1.1",
        "RDMACM_1.2",
        "RDMACM_1.3",
    ]) {
        let _ = writeln!(map, "{n} {{ }} {prev};");
    }
    std::fs::write(out.join("rdmacm.s"), asm).expect("writing rdmacm.s");
    std::fs::write(out.join("rdmacm.map"), map).expect("writing rdmacm.map");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.join("rdmacm.map").display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    // The entry points jump into libibverbs.so.1 (`__wc_*`): it must be a DT_NEEDED of
    // ours, as it is of Debian's librdmacm.so.1, or a program that calls only rdma_*
    // functions, linked with -Wl,--as-needed (Debian's gcc default), has no libibverbs
    // loaded and fails with "undefined symbol: __wc_rdma_...". The system's library gives
    // the entry its name (its soname, libibverbs.so.1), found on the linker's own search
    // path (any architecture's; libibverbs1, which scripts/install-deps.sh installs with
    // libibverbs-dev); at run time the loader finds ours first (with-warpcore's
    // LD_LIBRARY_PATH).
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed,-l:libibverbs.so.1,--as-needed");
}
