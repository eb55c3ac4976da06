//! `cfdp run`'s configuration: TOML read with the `config` crate, the
//! embedded default (`configs/default.toml`, compiled in) first, then the
//! file given with `--config`, then `CFDP_<SECTION>__<KEY>` environment
//! overrides. Unknown keys are refused with the key's name.

use std::path::{Path, PathBuf};

use cfdp_cluster::ClusterSection;
use cfdp_control::settings::{ControlSection, FilterSection};
use cfdp_control::StoreConfig;
use cfdp_engine::Mode;
use cfdp_p4runtime::P4RuntimeSection;
use serde::{Deserialize, Serialize};

use crate::error::RunError;

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
    /// The rule store's parameters.
    pub fn store_config(&self) -> Result<StoreConfig, RunError> {
        self.control.check()?;
        Ok(self
            .filter
            .store_config(self.dataplane.mode, self.control.max_rules)?)
    }
}

/// Loads the embedded default, then `path` over it, then the environment.
pub fn load_config(path: Option<&Path>) -> Result<RunConfig, RunError> {
    use config::{Environment, File, FileFormat};
    let mut b =
        config::Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml));
    if let Some(p) = path {
        if !p.exists() {
            return Err(RunError::ConfigMissing(p.to_path_buf()));
        }
        b = b.add_source(File::from(p).format(FileFormat::Toml));
    }
    b = b.add_source(
        Environment::with_prefix("CFDP")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true),
    );
    let what = path.map_or("embedded default".to_string(), |p| p.display().to_string());
    b.build()
        .and_then(config::Config::try_deserialize::<RunConfig>)
        .map_err(|source| RunError::ConfigLoad { what, source })
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
}
