//! `cfdp run`'s configuration: its sections' types and the embedded
//! default (`configs/default.toml`, compiled in). The binary reads it
//! with the `config` crate (`dataplane/cli/src/load.rs`): the default
//! first, then the file given with `--config`, then
//! `CFDP_<SECTION>__<KEY>` environment overrides; unknown keys are
//! refused with the key's name. A crate of its own, below the binary and
//! the testkit, so that tests (and the testkit's fleet and soak nodes)
//! write configurations from these structs, not by hand.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use cfdp_cluster::ClusterSection;
use cfdp_control::settings::{ControlSection, FilterSection};
use cfdp_engine::Mode;
use cfdp_p4runtime::P4RuntimeSection;
use serde::{Deserialize, Serialize};

/// The embedded default configuration.
pub const DEFAULT_CONFIG: &str = include_str!("../../../configs/default.toml");

/// The whole configuration: the binary's own sections (`dataplane`,
/// `pcap`, `rules`) and the ones each crate owns, composed as they are.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    pub dataplane: DataplaneConfig,
    pub pcap: PcapConfig,
    pub rules: RulesConfig,
    pub filter: FilterSection,
    pub control: ControlSection,
    pub dpdk: cfdp_dpdk::DpdkOptions,
    pub cluster: ClusterSection,
    pub p4runtime: P4RuntimeSection,
    pub conntrack: cfdp_conntrack::ConntrackSection,
    pub ipfix: cfdp_export::IpfixSection,
}

/// What a worker does when it falls behind the reader.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Overload {
    /// The reader waits (lossless replay).
    Block,
    /// The burst is dropped and counted in `rx_dropped`, as a NIC does.
    Drop,
}

/// `[dataplane]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Worker threads; 0: cores − 1 (at least 1).
    pub workers: usize,
    pub mode: Mode,
    pub overload: Overload,
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        Self {
            workers: 0,
            mode: Mode::Verify,
            overload: Overload::Block,
        }
    }
}

/// `[pcap]`: the replayed capture and where forwarded packets go.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PcapConfig {
    pub input: PathBuf,
    /// Empty: forwarded packets are not written.
    pub output: String,
    #[serde(rename = "loop")]
    pub repeat: bool,
    /// Frames per second to replay at (0: as fast as possible).
    pub pps: u64,
}

impl Default for PcapConfig {
    fn default() -> Self {
        Self {
            input: "pcap/mixed.pcap".into(),
            output: String::new(),
            repeat: false,
            pps: 0,
        }
    }
}

/// `[rules]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// The initial rule file; empty: no rules (everything forwarded).
    pub file: String,
}

impl Default for RulesConfig {
    fn default() -> Self {
        Self {
            file: "pcap/mixed.rules.json".into(),
        }
    }
}

impl RunConfig {
    /// The configuration as TOML, every key written: what a test hands
    /// `cfdp run --config` (the structs, not hand-written text, so that a
    /// renamed key fails to compile). An error only for a value TOML
    /// cannot hold (an integer past `i64::MAX`).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `configs/default.toml` says what the structs' defaults are: a key
    /// changed in one and not the other fails here.
    #[test]
    fn the_embedded_default_is_the_structs_defaults() {
        use config::{File, FileFormat};
        let from_file: RunConfig = config::Config::builder()
            .add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml))
            .build()
            .and_then(config::Config::try_deserialize)
            .unwrap();
        let defaults = RunConfig::default();
        assert_eq!(from_file.dataplane, defaults.dataplane);
        assert_eq!(from_file.pcap, defaults.pcap);
        assert_eq!(from_file.rules, defaults.rules);
        assert_eq!(from_file.filter, defaults.filter);
        assert_eq!(from_file.control, defaults.control);
        assert_eq!(from_file.dpdk, defaults.dpdk);
        assert_eq!(from_file.cluster, defaults.cluster);
        assert_eq!(from_file.p4runtime, defaults.p4runtime);
        assert_eq!(from_file.conntrack, defaults.conntrack);
        assert_eq!(from_file, defaults);
    }

    /// Every key of every section is written in the embedded default (a
    /// key that only the struct knows is undocumented).
    #[test]
    fn the_embedded_default_names_every_key() {
        use config::{File, FileFormat};
        let file: serde_json::Value = config::Config::builder()
            .add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml))
            .build()
            .and_then(config::Config::try_deserialize)
            .unwrap();
        let structs = serde_json::to_value(RunConfig::default()).unwrap();
        for (section, keys) in structs.as_object().unwrap() {
            let written = file[section].as_object().unwrap();
            for key in keys.as_object().unwrap().keys() {
                assert!(
                    written.contains_key(key),
                    "[{section}] {key} is not in default.toml"
                );
            }
        }
    }

    /// What `to_toml` writes reads back as the same configuration (every
    /// key, every value TOML can hold).
    #[test]
    fn to_toml_reads_back_as_the_same_configuration() {
        use config::{File, FileFormat};
        let mut c = RunConfig::default();
        c.dataplane.workers = 3;
        c.pcap.input = "x.pcap".into();
        c.ipfix.sampling = 9;
        let back: RunConfig = config::Config::builder()
            .add_source(File::from_str(&c.to_toml().unwrap(), FileFormat::Toml))
            .build()
            .and_then(config::Config::try_deserialize)
            .unwrap();
        assert_eq!(back, c);
    }
}
