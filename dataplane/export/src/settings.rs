//! The `[ipfix]` section of `cfdp run`'s configuration.

use std::net::{SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Serialize};

use crate::cache::CacheSettings;

/// `[ipfix]`: where flow records go, and how long a flow's record lives
/// in a worker's cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IpfixSection {
    /// Collectors, `HOST:PORT` each (UDP); none: no export.
    pub collectors: Vec<String>,
    /// The observation domain id in every message's header.
    pub observation_domain: u32,
    /// Seconds without a packet after which a flow's record is sent.
    pub idle_timeout_s: u64,
    /// Seconds after which a long flow's record is sent and a new one
    /// starts.
    pub active_timeout_s: u64,
    /// Flows a worker's cache holds, 64 bytes each, allocated at start; a
    /// new flow whose set is full sends that set's oldest record early
    /// (counted in `export_early`).
    pub cache_flows: usize,
    /// 1 in this many frames a worker receives goes to its cache
    /// (systematic count-based selection, per worker: the first and every
    /// Nth after it; 1: every frame), stated to the collectors in an
    /// options template. Records count the packets taken; a collector
    /// scales them by the rate.
    pub sampling: u32,
    /// Both directions of a tracked connection (stateful rules) in one
    /// biflow record (RFC 5103: the answers' packets and bytes as reverse
    /// elements), instead of a record a direction. For collectors that
    /// read reverse elements (nfdump does; pmacct 1.7 counts the forward
    /// half only). Flows no connection tracks are uniflow records either
    /// way.
    pub biflow: bool,
    /// The private enterprise number (IANA assigns them free of charge)
    /// under which each record names the rule that decided its first
    /// packet (element 1 of that PEN, unsigned32: no IANA element names a
    /// rule); 0: the rule is not exported. A collector reads it as a
    /// custom element (pmacct: `aggregate_primitives`, `field_type
    /// PEN:1`).
    pub rule_pen: u32,
}

impl Default for IpfixSection {
    fn default() -> Self {
        let c = CacheSettings::default();
        Self {
            collectors: Vec::new(),
            observation_domain: 0,
            idle_timeout_s: c.idle_ns / 1_000_000_000,
            active_timeout_s: c.active_ns / 1_000_000_000,
            cache_flows: c.capacity,
            sampling: 1,
            biflow: c.biflow,
            rule_pen: 0,
        }
    }
}

/// The largest 1-in-N sampling rate taken.
pub const MAX_SAMPLING: u32 = 1_000_000;

/// A collector that cannot be sent to, with what was given.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// Not `HOST:PORT`, or the name did not resolve.
    #[error("{given}: {source} (expected HOST:PORT)")]
    Unresolved {
        given: String,
        #[source]
        source: std::io::Error,
    },
    /// The name resolved to no address.
    #[error("{given}: the name has no address")]
    NoAddress { given: String },
}

/// A collector's `HOST:PORT`, resolved (the first address a name has).
pub fn collector(c: &str) -> Result<SocketAddr, CollectorError> {
    c.to_socket_addrs()
        .map_err(|source| CollectorError::Unresolved {
            given: c.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| CollectorError::NoAddress {
            given: c.to_string(),
        })
}

/// An `[ipfix]` value refused: the key, the value, what it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadSetting {
    pub key: &'static str,
    pub value: String,
    pub need: &'static str,
}

impl IpfixSection {
    /// The collectors' addresses, each name resolved, and the cache's
    /// settings; the first value that cannot work, refused.
    pub fn resolve(&self) -> Result<(Vec<SocketAddr>, CacheSettings), BadSetting> {
        if self.idle_timeout_s == 0 {
            return Err(BadSetting {
                key: "idle_timeout_s",
                value: "0".into(),
                need: "at least 1",
            });
        }
        if self.active_timeout_s < self.idle_timeout_s {
            return Err(BadSetting {
                key: "active_timeout_s",
                value: self.active_timeout_s.to_string(),
                need: "at least idle_timeout_s",
            });
        }
        if !(1..=MAX_SAMPLING).contains(&self.sampling) {
            return Err(BadSetting {
                key: "sampling",
                value: self.sampling.to_string(),
                need: "1 (every packet) to 1000000",
            });
        }
        if !(1024..=1 << 24).contains(&self.cache_flows) {
            return Err(BadSetting {
                key: "cache_flows",
                value: self.cache_flows.to_string(),
                need: "1024 to 16777216 flows a worker",
            });
        }
        let collectors = self
            .collectors
            .iter()
            .map(|c| {
                collector(c).map_err(|_| BadSetting {
                    key: "collectors",
                    value: c.clone(),
                    need: "HOST:PORT that resolves",
                })
            })
            .collect::<Result<_, _>>()?;
        let cache = CacheSettings {
            capacity: self.cache_flows,
            idle_ns: self.idle_timeout_s.saturating_mul(1_000_000_000),
            active_ns: self.active_timeout_s.saturating_mul(1_000_000_000),
            biflow: self.biflow,
            rules: self.rule_pen != 0,
        };
        Ok((collectors, cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_that_cannot_work_is_refused_by_its_key() {
        let ok = IpfixSection {
            collectors: vec!["127.0.0.1:4739".into()],
            ..IpfixSection::default()
        };
        let (c, cache) = ok.resolve().unwrap();
        assert_eq!(c, vec!["127.0.0.1:4739".parse().unwrap()]);
        assert_eq!(cache, CacheSettings::default());
        let biflow = IpfixSection {
            biflow: true,
            ..ok.clone()
        };
        assert!(
            biflow.resolve().unwrap().1.biflow,
            "biflow reaches the caches"
        );
        let key = |s: IpfixSection| s.resolve().unwrap_err().key;
        assert_eq!(
            key(IpfixSection {
                idle_timeout_s: 0,
                ..ok.clone()
            }),
            "idle_timeout_s"
        );
        assert_eq!(
            key(IpfixSection {
                active_timeout_s: 5,
                ..ok.clone()
            }),
            "active_timeout_s"
        );
        assert_eq!(
            key(IpfixSection {
                cache_flows: 10,
                ..ok.clone()
            }),
            "cache_flows"
        );
        for sampling in [0, MAX_SAMPLING + 1] {
            assert_eq!(
                key(IpfixSection {
                    sampling,
                    ..ok.clone()
                }),
                "sampling"
            );
        }
        assert_eq!(
            key(IpfixSection {
                collectors: vec!["no port here".into()],
                ..ok
            }),
            "collectors"
        );
    }
}
