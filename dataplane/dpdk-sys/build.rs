//! Finds the system DPDK with pkg-config and compiles the C shim against it.
//!
//! Without DPDK the crate builds empty (`cfg(dpdk)` unset, `found=0` for
//! dependents' build scripts as `DEP_DPDK_FOUND`), so `cargo test
//! --workspace` needs only the Rust toolchain. With the `require` feature
//! (what `cfdp --features dpdk` turns on) a missing DPDK is a build error
//! that names the packages to install.

use std::process::Command;

const INSTALL: &str = "install it with: apt-get install dpdk dpdk-dev libdpdk-dev pkg-config \
                       (Debian 12 ships DPDK 22.11 LTS)";

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo::rustc-check-cfg=cfg(dpdk)");
    let lib = match pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(false)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            if std::env::var_os("CARGO_FEATURE_REQUIRE").is_some() {
                panic!(
                    "\n\ncfdp-dpdk-sys: DPDK (pkg-config libdpdk >= 22.11) not found: {e}\n\
                     {INSTALL}\n\n"
                );
            }
            println!("cargo:found=0");
            return;
        }
    };
    // Link flags only now that DPDK is there (probe ran without them).
    pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .expect("libdpdk was just found");
    // The pkg-config crate exposes include paths but not DPDK's other
    // compile flags (`-include rte_config.h`, `-march=...`), which its
    // headers need: take them from pkg-config itself.
    let out = Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| panic!("cfdp-dpdk-sys: cannot run pkg-config: {e}\n{INSTALL}"));
    let cflags = String::from_utf8_lossy(&out.stdout).to_string();
    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(true).opt_level(3);
    for p in &lib.include_paths {
        build.include(p);
    }
    let mut it = cflags.split_whitespace();
    while let Some(f) = it.next() {
        if f == "-include" {
            if let Some(h) = it.next() {
                build.flag("-include").flag(h);
            }
        } else if !f.starts_with("-I") {
            build.flag(f);
        }
    }
    build.compile("cfdp_dpdk_shim");
    // rte_eth_from_rings lives in the net_ring driver's library, which
    // pkg-config's list leaves to the EAL's plugin loading.
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");
    println!("cargo:rustc-cfg=dpdk");
    println!("cargo:found=1");
}
