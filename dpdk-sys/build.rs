//! Generates the DPDK bindings with bindgen and compiles the C shim, both with the cflags
//! `pkg-config` reports for libdpdk (they include `-include rte_config.h -march=...`, which
//! must match between the bindings, the shim and the installed libraries).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/wrapper.h");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=build.rs");

    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "libdpdk (>= 22.11) not found through pkg-config: {e}\n\
                 install it with scripts/install-dpdk.sh (apt-get install dpdk-dev libdpdk-dev)"
            )
        });

    // pkg-config-rs splits include paths from other flags; bindgen and cc need both.
    let raw = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("running pkg-config --cflags libdpdk");
    let flags: Vec<String> = String::from_utf8_lossy(&raw.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();

    // The ring PMD's constructor API (rte_eth_from_rings) is not in the pkg-config link line.
    println!("cargo:rustc-link-lib=rte_net_ring");

    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(false).opt_level(3);
    for inc in &lib.include_paths {
        build.include(inc);
    }
    for f in &flags {
        build.flag(f);
    }
    build.compile("warpcore_dpdk_shim");

    let bindings = bindgen::Builder::default()
        .header("src/wrapper.h")
        .clang_args(&flags)
        .clang_args(
            lib.include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .allowlist_function("rte_.*")
        .allowlist_function("wc_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_psc_.*")
        .clang_macro_fallback()
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .prepend_enum_name(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the DPDK headers");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs");
}
