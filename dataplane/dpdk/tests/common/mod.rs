//! What the DPDK test files share.

use cfdp_dpdk::{backend, Eal};

/// The EAL of a test binary on virtual devices only: no huge pages, no
/// PCI, `mb` MB, one lcore, its own file prefix (`name` and the process
/// id, so runs never meet), warnings only; `extra` after (`--vdev …`).
pub fn vdev_eal(name: &str, mb: u32, extra: &[String]) -> Eal {
    let mut args: Vec<String> = [
        "--no-huge",
        "--no-pci",
        "-m",
        &mb.to_string(),
        "--file-prefix",
        &format!("cfdp-{name}-{}", std::process::id()),
        "-l",
        "0",
        "--log-level",
        "*:warning",
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(extra);
    backend::init_eal(&args).expect("EAL")
}
