//! `cfdp run`'s configuration: TOML read with the `config` crate, the
//! embedded default (`configs/default.toml`, compiled in) first, then the
//! file given with `--config`, then `CFDP_<SECTION>__<KEY>` environment
//! overrides. Unknown keys are refused with the key's name.

use std::path::{Path, PathBuf};

use cfdp_control::StoreConfig;
use cfdp_engine::Mode;
use cfdp_filter::BloomMode;
use serde::Deserialize;

use crate::error::RunError;

/// The embedded default configuration.
pub const DEFAULT_CONFIG: &str = include_str!("../../../configs/default.toml");

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub dataplane: DataplaneConfig,
    pub pcap: PcapConfig,
    pub rules: RulesConfig,
    pub filter: FilterConfig,
    pub control: ControlConfig,
    pub dpdk: cfdp_dpdk::DpdkOptions,
    pub cluster: ClusterConfig,
    pub p4runtime: P4RuntimeConfig,
}

/// `[p4runtime]`: the P4Runtime listener (see `cfdp_p4runtime`).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct P4RuntimeConfig {
    /// `HOST:PORT`; empty: off.
    pub listen: String,
    pub allow_remote: bool,
    pub device_id: u64,
    pub max_controllers: usize,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_client_ca: String,
}

/// `[cluster]`: this node as one of a fleet sharing its rule set in etcd
/// (cargo feature `etcd`; see `cfdp_cluster`).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// etcd endpoints; empty: standalone.
    pub etcd: Vec<String>,
    /// The fleet's keys live under this prefix.
    pub prefix: String,
    /// This node's name, unique in the fleet (empty: the host name).
    pub node: String,
    /// TLS and authentication towards etcd (`cfdp_cluster::security`);
    /// empty: none.
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub user: String,
    pub password_file: String,
}

impl ClusterConfig {
    /// The TLS and authentication settings (empty strings: unset).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub fn security(&self) -> cfdp_cluster::EtcdSecurity {
        let path = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
        cfdp_cluster::EtcdSecurity {
            ca_file: path(&self.ca_file),
            cert_file: path(&self.cert_file),
            key_file: path(&self.key_file),
            user: (!self.user.is_empty()).then(|| self.user.clone()),
            password_file: path(&self.password_file),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Overload {
    Block,
    Drop,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    pub workers: usize,
    pub mode: Mode,
    pub overload: Overload,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcapConfig {
    pub input: PathBuf,
    pub output: String,
    #[serde(rename = "loop")]
    pub repeat: bool,
    /// Frames per second to replay at (0: as fast as possible).
    pub pps: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// Empty: no rules (everything forwarded).
    pub file: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum InsertPath {
    Bloom,
    Cuckoo,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    pub flow_capacity: usize,
    pub prefix_capacity: usize,
    pub insert: InsertPath,
    pub bloom_tag_bits: u32,
    pub threshold: u32,
    pub max_kicks: u32,
    pub auto_grow: bool,
    /// Seed of the filters' hash secrets; 0: random in filter-only mode.
    pub hash_seed: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub socket: String,
    pub allowed_uids: Vec<u32>,
    pub allowed_gids: Vec<u32>,
    pub tcp: String,
    pub tcp_allow_remote: bool,
    /// The TCP door's token (created 0600 on first start if missing).
    pub token_file: String,
    pub metrics: String,
    pub state_dir: String,
    pub compact_every: u64,
    pub compact_bytes: u64,
    pub max_rules: usize,
    pub max_batch: usize,
    pub max_line_bytes: usize,
    pub idle_timeout_s: u64,
    /// A request line must arrive whole within this many seconds of its
    /// first byte (a client trickling bytes is closed).
    pub request_timeout_s: u64,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// Bytes of request lines parsed at once, over all connections.
    pub max_parse_bytes: usize,
    pub migrate_budget: usize,
    /// Test hook (`PlaneConfig::hold_batches`); empty: off.
    pub hold_batches: String,
}

impl RunConfig {
    /// The rule store's parameters.
    pub fn store_config(&self) -> Result<StoreConfig, RunError> {
        let f = &self.filter;
        let bloom = match (f.insert, f.bloom_tag_bits) {
            (InsertPath::Cuckoo, _) => None,
            (InsertPath::Bloom, 0) => Some(BloomMode::Bit),
            (InsertPath::Bloom, b @ 2..=32) => Some(BloomMode::Tag { bits: b }),
            (InsertPath::Bloom, b) => {
                return Err(RunError::Config(format!(
                    "filter.bloom_tag_bits = {b}: must be 0 or 2..=32"
                )))
            }
        };
        if !(1..=cfdp_filter::MAX_KICKS_LIMIT).contains(&f.max_kicks) {
            return Err(RunError::Config(format!(
                "filter.max_kicks = {}: must be 1..={}",
                f.max_kicks,
                cfdp_filter::MAX_KICKS_LIMIT
            )));
        }
        let c = &self.control;
        if c.max_batch == 0 || c.max_line_bytes < 1024 || c.max_connections == 0 {
            return Err(RunError::Config(
                "control: max_batch and max_connections must be ≥ 1, max_line_bytes ≥ 1024".into(),
            ));
        }
        Ok(StoreConfig {
            mode: self.dataplane.mode,
            flow_capacity: f.flow_capacity,
            prefix_capacity: f.prefix_capacity,
            bloom,
            threshold: f.threshold,
            max_kicks: f.max_kicks,
            auto_grow: f.auto_grow,
            hash_secret: cfdp_control::store::hash_secret_for(self.dataplane.mode, f.hash_seed)
                .map_err(|e| RunError::Config(e.to_string()))?,
            max_rules: c.max_rules,
        })
    }
}

/// Loads the embedded default, then `path` over it, then the environment.
pub fn load_config(path: Option<&Path>) -> Result<RunConfig, RunError> {
    use config::{Environment, File, FileFormat};
    let mut b =
        config::Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml));
    if let Some(p) = path {
        if !p.exists() {
            return Err(RunError::Config(format!(
                "config file {} does not exist",
                p.display()
            )));
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
