//! The `[control]` and `[filter]` sections of cfdp's configuration: one
//! struct each, holding the keys, their defaults (the `Default` impls,
//! which take the control plane's own defaults), the checks, and what the
//! rest of this crate is built from. The binary composes these sections
//! with the other crates' (`cfdp_cluster::ClusterSection`,
//! `cfdp_p4runtime::P4RuntimeSection`, `cfdp_dpdk::DpdkOptions`) without
//! re-declaring a field; `configs/default.toml` documents the same
//! defaults, and a test in the binary checks it against these structs.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cfdp_engine::Mode;
use cfdp_filter::BloomMode;
use serde::{Deserialize, Serialize};

use crate::api::RequestLimits;
use crate::plane::PlaneConfig;
use crate::server::{Limits, SocketAccess};
use crate::slots::SlotLimits;
use crate::store::{hash_secret_for, StoreConfig};

/// A configuration value refused: which key, the value given, and what
/// the key needs. Every section's checks answer with this one type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{section}.{key} = {value}: {need}")]
pub struct SettingError {
    pub section: &'static str,
    pub key: &'static str,
    /// The value as given (formatted).
    pub value: String,
    pub need: Cow<'static, str>,
}

impl SettingError {
    pub fn new(
        section: &'static str,
        key: &'static str,
        value: impl std::fmt::Display,
        need: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            section,
            key,
            value: value.to_string(),
            need: need.into(),
        }
    }
}

/// `[control]`: the doors (Unix socket, TCP, metrics), their limits, the
/// journal and the control thread's pacing.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// Unix socket of the control protocol; empty: no socket.
    pub socket: String,
    /// Peers allowed on the socket by uid or gid (`SO_PEERCRED`); both
    /// empty: only the uid cfdp runs as.
    pub allowed_uids: Vec<u32>,
    pub allowed_gids: Vec<u32>,
    /// `IP:PORT` of the TCP door; empty: none.
    pub tcp: String,
    /// A non-loopback `tcp` address is refused unless this is set.
    pub tcp_allow_remote: bool,
    /// The TCP door's token (created 0600 on first start if missing).
    pub token_file: String,
    /// `IP:PORT` of the Prometheus endpoint; empty: none.
    pub metrics: String,
    /// Journal and snapshot directory; empty: rules are not persisted.
    pub state_dir: String,
    /// Compact the journal after this many batches...
    pub compact_every: u64,
    /// ...or once it holds this many bytes.
    pub compact_bytes: u64,
    /// Most rules at once.
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
    /// Bloom-part elements migrated per filter per idle step.
    pub migrate_budget: usize,
}

impl Default for ControlSection {
    fn default() -> Self {
        let plane = PlaneConfig::default();
        Self {
            socket: "cfdp.sock".into(),
            allowed_uids: Vec::new(),
            allowed_gids: Vec::new(),
            tcp: String::new(),
            tcp_allow_remote: false,
            token_file: "cfdp.token".into(),
            metrics: String::new(),
            state_dir: String::new(),
            compact_every: plane.compact_every,
            compact_bytes: plane.compact_bytes,
            max_rules: StoreConfig::default().max_rules,
            max_batch: plane.requests.max_batch,
            max_line_bytes: plane.requests.max_line_bytes,
            idle_timeout_s: 300,
            request_timeout_s: 30,
            max_connections: 64,
            max_connections_per_peer: 16,
            max_parse_bytes: 32 << 20,
            migrate_budget: plane.migrate_budget,
        }
    }
}

/// The shortest `max_line_bytes` accepted: a `hello` with a token and an
/// `apply` of one rule fit.
pub const MIN_LINE_BYTES: usize = 1024;

impl ControlSection {
    /// Every key that has a least value, checked (a zero is refused, not
    /// raised to one behind the operator's back).
    pub fn check(&self) -> Result<(), SettingError> {
        let least: [(&'static str, u64, u64); 11] = [
            ("compact_every", self.compact_every, 1),
            ("compact_bytes", self.compact_bytes, 1),
            ("max_rules", self.max_rules as u64, 1),
            ("max_batch", self.max_batch as u64, 1),
            (
                "max_line_bytes",
                self.max_line_bytes as u64,
                MIN_LINE_BYTES as u64,
            ),
            ("idle_timeout_s", self.idle_timeout_s, 1),
            ("request_timeout_s", self.request_timeout_s, 1),
            ("max_connections", self.max_connections as u64, 1),
            (
                "max_connections_per_peer",
                self.max_connections_per_peer as u64,
                1,
            ),
            ("max_parse_bytes", self.max_parse_bytes as u64, 1),
            ("migrate_budget", self.migrate_budget as u64, 1),
        ];
        for (key, value, min) in least {
            if value < min {
                return Err(SettingError::new(
                    "control",
                    key,
                    value,
                    format!("must be at least {min}"),
                ));
            }
        }
        self.tcp_addr()?;
        self.metrics_addr()?;
        if self.max_rules > u32::MAX as usize {
            return Err(SettingError::new(
                "control",
                "max_rules",
                self.max_rules,
                format!("must be at most {}", u32::MAX),
            ));
        }
        Ok(())
    }

    /// `tcp`, checked: `None` when empty; a non-loopback address only with
    /// `tcp_allow_remote`.
    pub fn tcp_addr(&self) -> Result<Option<SocketAddr>, SettingError> {
        addr(
            "tcp",
            &self.tcp,
            self.tcp_allow_remote,
            "not a loopback address (set control.tcp_allow_remote = true to accept that: the \
             token is sent in clear, so tunnel the door over SSH or TLS)",
        )
    }

    /// `metrics`, checked: `None` when empty; loopback only.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, SettingError> {
        addr(
            "metrics",
            &self.metrics,
            false,
            "not a loopback address (metrics are served on loopback only: scrape them through \
             a proxy)",
        )
    }

    /// The request bounds every door and the control thread hold to.
    pub fn requests(&self) -> RequestLimits {
        RequestLimits {
            max_batch: self.max_batch,
            max_line_bytes: self.max_line_bytes,
        }
    }

    /// The control thread's settings (its test hooks off).
    pub fn plane(&self) -> PlaneConfig {
        PlaneConfig {
            requests: self.requests(),
            compact_every: self.compact_every,
            compact_bytes: self.compact_bytes,
            migrate_budget: self.migrate_budget,
            ..PlaneConfig::default()
        }
    }

    /// The listeners' limits and access rules, for a process running as
    /// `own_uid`.
    pub fn limits(&self, own_uid: u32) -> Limits {
        Limits {
            requests: self.requests(),
            idle_timeout: Duration::from_secs(self.idle_timeout_s),
            request_timeout: Duration::from_secs(self.request_timeout_s),
            allowed_uids: if self.allowed_uids.is_empty() && self.allowed_gids.is_empty() {
                vec![own_uid]
            } else {
                self.allowed_uids.clone()
            },
            allowed_gids: self.allowed_gids.clone(),
        }
    }

    /// Who may open the Unix socket, and so its mode.
    pub fn socket_access(&self, own_uid: u32) -> SocketAccess {
        SocketAccess::for_peers(own_uid, &self.allowed_uids, &self.allowed_gids)
    }

    /// The connection slots of both doors.
    pub fn slot_limits(&self) -> SlotLimits {
        SlotLimits::new(self.max_connections, self.max_connections_per_peer)
    }

    /// `state_dir`, when rules are persisted.
    pub fn state_dir(&self) -> Option<PathBuf> {
        (!self.state_dir.is_empty()).then(|| PathBuf::from(&self.state_dir))
    }
}

/// A door's `IP:PORT` under `[control]` `key`.
fn addr(
    key: &'static str,
    text: &str,
    allow_remote: bool,
    remote: &'static str,
) -> Result<Option<SocketAddr>, SettingError> {
    if text.is_empty() {
        return Ok(None);
    }
    let bad = |need| SettingError::new("control", key, format!("{text:?}"), need);
    let sa: SocketAddr = text.parse().map_err(|_| bad("not an IP:port address"))?;
    if !sa.ip().is_loopback() && !allow_remote {
        return Err(bad(remote));
    }
    Ok(Some(sa))
}

/// `[filter]`'s insert path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InsertPath {
    /// The Bloom-Cuckoo path (Algorithm 2 of the Bloom-Cuckoo paper).
    Bloom,
    /// Plain cuckoo inserts.
    Cuckoo,
}

/// `[filter]`: the flow and prefix filters.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterSection {
    /// Items the flow-rule filter is sized for at first.
    pub flow_capacity: usize,
    /// Items each prefix-class filter is sized for at first.
    pub prefix_capacity: usize,
    pub insert: InsertPath,
    /// The Bloom field per bucket: 0 = one bit (the paper), 2..=32 = a tag.
    pub bloom_tag_bits: u32,
    /// Threshold `t`: the Bloom part may take an item from iteration t + 1.
    pub threshold: u32,
    pub max_kicks: u32,
    /// Rebuild a full filter at twice the size instead of refusing inserts.
    pub auto_grow: bool,
    /// Seed of the filters' hash secrets; 0: random in filter-only mode.
    pub hash_seed: u64,
}

impl Default for FilterSection {
    fn default() -> Self {
        let s = StoreConfig::default();
        let (insert, bloom_tag_bits) = match s.bloom {
            None => (InsertPath::Cuckoo, 0),
            Some(BloomMode::Bit) => (InsertPath::Bloom, 0),
            Some(BloomMode::Tag { bits }) => (InsertPath::Bloom, bits),
        };
        Self {
            flow_capacity: s.flow_capacity,
            prefix_capacity: s.prefix_capacity,
            insert,
            bloom_tag_bits,
            threshold: s.threshold,
            max_kicks: s.max_kicks,
            auto_grow: s.auto_grow,
            hash_seed: 0,
        }
    }
}

impl FilterSection {
    /// The rule store's parameters for `mode` and `control.max_rules`,
    /// checked. Draws the hash secrets (random ones in filter-only mode
    /// unless `hash_seed` is set).
    pub fn store_config(&self, mode: Mode, max_rules: usize) -> Result<StoreConfig, SettingError> {
        let bloom = match (self.insert, self.bloom_tag_bits) {
            (InsertPath::Cuckoo, _) => None,
            (InsertPath::Bloom, 0) => Some(BloomMode::Bit),
            (InsertPath::Bloom, b @ 2..=32) => Some(BloomMode::Tag { bits: b }),
            (InsertPath::Bloom, b) => {
                return Err(SettingError::new(
                    "filter",
                    "bloom_tag_bits",
                    b,
                    "must be 0 or 2..=32",
                ))
            }
        };
        if !(1..=cfdp_filter::MAX_KICKS_LIMIT).contains(&self.max_kicks) {
            return Err(SettingError::new(
                "filter",
                "max_kicks",
                self.max_kicks,
                format!("must be 1..={}", cfdp_filter::MAX_KICKS_LIMIT),
            ));
        }
        let hash_secret = hash_secret_for(mode, self.hash_seed)
            .map_err(|e| SettingError::new("filter", "hash_seed", self.hash_seed, e.to_string()))?;
        Ok(StoreConfig {
            mode,
            flow_capacity: self.flow_capacity,
            prefix_capacity: self.prefix_capacity,
            bloom,
            threshold: self.threshold,
            max_kicks: self.max_kicks,
            auto_grow: self.auto_grow,
            max_rules,
            hash_secret,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_is_refused_with_its_key() {
        let c = ControlSection {
            compact_every: 0,
            ..ControlSection::default()
        };
        let e = c.check().unwrap_err();
        assert_eq!(
            (e.section, e.key, e.value.as_str()),
            ("control", "compact_every", "0")
        );
        let c = ControlSection {
            max_line_bytes: MIN_LINE_BYTES - 1,
            ..ControlSection::default()
        };
        assert_eq!(c.check().unwrap_err().key, "max_line_bytes");
        assert_eq!(ControlSection::default().check(), Ok(()));
    }

    #[test]
    fn door_addresses_are_checked_before_anything_binds() {
        let c = |tcp: &str, remote: bool, metrics: &str| ControlSection {
            tcp: tcp.into(),
            tcp_allow_remote: remote,
            metrics: metrics.into(),
            ..ControlSection::default()
        };
        assert_eq!(c("", false, "").check(), Ok(()));
        assert_eq!(c("0.0.0.0:1", false, "").check().unwrap_err().key, "tcp");
        assert_eq!(c("0.0.0.0:1", true, "").check(), Ok(()));
        assert_eq!(c("no", true, "").check().unwrap_err().key, "tcp");
        assert_eq!(
            c("", false, "0.0.0.0:9").check().unwrap_err().key,
            "metrics"
        );
        assert_eq!(
            c("", false, "[::1]:9").metrics_addr(),
            Ok(Some("[::1]:9".parse().unwrap()))
        );
    }

    #[test]
    fn the_filter_defaults_are_the_stores() {
        let s = FilterSection::default()
            .store_config(Mode::Verify, ControlSection::default().max_rules)
            .unwrap();
        assert_eq!(s, StoreConfig::default());
    }

    #[test]
    fn filter_values_out_of_range_are_refused() {
        let f = FilterSection {
            bloom_tag_bits: 1,
            ..FilterSection::default()
        };
        assert_eq!(
            f.store_config(Mode::Verify, 10).unwrap_err().key,
            "bloom_tag_bits"
        );
        let f = FilterSection {
            max_kicks: 0,
            ..FilterSection::default()
        };
        assert_eq!(
            f.store_config(Mode::Verify, 10).unwrap_err().key,
            "max_kicks"
        );
    }
}
