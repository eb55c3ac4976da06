//! Compiles the safe layer only where `cfdp-dpdk-sys` found the system
//! DPDK (`DEP_DPDK_FOUND=1`); elsewhere the crate is empty.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(dpdk)");
    println!("cargo:rerun-if-env-changed=DEP_DPDK_FOUND");
    if std::env::var("DEP_DPDK_FOUND").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=dpdk");
    }
}
