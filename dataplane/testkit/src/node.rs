//! `cfdp run` nodes' configurations for the tests, the soaks and the
//! benchmarks, built from `cfdp-config`'s structs (a renamed key fails to
//! compile): the looping node they all start from, and its file.

use std::path::Path;

use cfdp_config::RunConfig;

/// A node replaying `input` in a loop at `pps` frames/s, no rule file,
/// its control socket and state directory (an empty path: none); every
/// other key at its default.
pub fn looping(input: &Path, pps: u64, socket: &Path, state_dir: &Path) -> RunConfig {
    let mut c = RunConfig::default();
    c.pcap.input = input.to_path_buf();
    c.pcap.repeat = true;
    c.pcap.pps = pps;
    c.rules.file = String::new();
    c.control.socket = socket.display().to_string();
    c.control.state_dir = state_dir.display().to_string();
    c
}

/// Writes `c` to `path` as TOML, for `cfdp run --config path`.
pub fn write(path: &Path, c: &RunConfig) {
    let text = c.to_toml().expect("the node's configuration as TOML");
    std::fs::write(path, text).expect("write the node's configuration");
}
