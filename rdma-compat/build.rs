//! Generates the rdma-core layouts with bindgen over Debian's libibverbs-dev and
//! librdmacm-dev headers, and gives the library its soname and version nodes (the symbols
//! get their versions from `.symver` directives in `src/export.rs`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libibverbs.map");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for h in ["infiniband/verbs.h", "rdma/rdma_cma.h", "rdma/rdma_verbs.h"] {
        if !std::path::Path::new("/usr/include").join(h).exists() {
            panic!(
                "/usr/include/{h} is missing: install libibverbs-dev and librdmacm-dev \
                 (scripts/install-deps.sh does)"
            );
        }
    }
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_type("ibv_.*")
        .allowlist_type("verbs_.*")
        .allowlist_type("rdma_.*")
        .allowlist_type("sockaddr_in")
        .allowlist_var("IBV_.*")
        .allowlist_var("RDMA_.*")
        .allowlist_var("RAI_.*")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen over the rdma-core headers");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs");
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        dir.join("libibverbs.map").display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
