//! `[cluster]` of cfdp's configuration: this node as one of a fleet sharing
//! its rule set in etcd. One struct holds the keys, their defaults and
//! their checks; the binary composes it without re-declaring a field.

use std::path::PathBuf;

use cfdp_control::settings::SettingError;
use serde::{Deserialize, Serialize};

use crate::{EtcdSecurity, Keys};

/// `[cluster]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// etcd endpoints; empty: standalone.
    pub etcd: Vec<String>,
    /// The fleet's keys live under this prefix.
    pub prefix: String,
    /// This node's name, unique in the fleet (empty: the host name).
    pub node: String,
    /// TLS and authentication towards etcd ([`EtcdSecurity`]); empty:
    /// none.
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub user: String,
    pub password_file: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            etcd: Vec::new(),
            prefix: "/cfdp/default".into(),
            node: String::new(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            user: String::new(),
            password_file: String::new(),
        }
    }
}

impl ClusterSection {
    /// Whether this node is one of a fleet.
    pub fn enabled(&self) -> bool {
        !self.etcd.is_empty()
    }

    /// The key layout, from a checked `prefix`.
    pub fn keys(&self) -> Result<Keys, SettingError> {
        Keys::new(&self.prefix).map_err(|_| {
            SettingError::new(
                "cluster",
                "prefix",
                format!("{:?}", self.prefix),
                "must start with '/' and name something, e.g. \"/cfdp/prod\"",
            )
        })
    }

    /// The prefix, and no password towards a plain endpoint (it would
    /// travel in clear).
    pub fn check(&self) -> Result<(), SettingError> {
        self.keys()?;
        self.security().check_endpoints(&self.etcd).map_err(|e| {
            SettingError::new("cluster", "user", format!("{:?}", self.user), e.to_string())
        })
    }

    /// The TLS and authentication settings (empty strings: unset).
    pub fn security(&self) -> EtcdSecurity {
        let path = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        EtcdSecurity {
            ca_file: path(&self.ca_file),
            cert_file: path(&self.cert_file),
            key_file: path(&self.key_file),
            user: (!self.user.is_empty()).then(|| self.user.clone()),
            password_file: path(&self.password_file),
        }
    }

    /// `node`, or the host name (or `node-PID` when the host has none).
    pub fn node_name(&self) -> String {
        if !self.node.is_empty() {
            return self.node.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| format!("node-{}", std::process::id()))
    }

    /// The agent's options; `state_dir` is `[control]`'s.
    #[cfg(feature = "etcd")]
    pub fn node_options(&self, state_dir: Option<PathBuf>) -> crate::node::NodeOptions {
        crate::node::NodeOptions {
            endpoints: self.etcd.clone(),
            security: self.security(),
            prefix: self.prefix.clone(),
            node: self.node_name(),
            state_dir,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_prefix_names_its_key() {
        let c = ClusterSection {
            prefix: "relative".into(),
            ..ClusterSection::default()
        };
        let e = c.keys().unwrap_err();
        assert_eq!((e.section, e.key), ("cluster", "prefix"));
        assert!(ClusterSection::default().keys().is_ok());
    }

    #[test]
    fn a_user_needs_https_endpoints() {
        let c = ClusterSection {
            etcd: vec!["http://127.0.0.1:2379".into()],
            user: "node".into(),
            password_file: "/pw".into(),
            ..ClusterSection::default()
        };
        assert_eq!(c.check().unwrap_err().key, "user");
        let tls = ClusterSection {
            etcd: vec!["https://127.0.0.1:2379".into()],
            ..c.clone()
        };
        assert_eq!(tls.check(), Ok(()));
    }

    #[test]
    fn empty_strings_are_unset() {
        assert_eq!(
            ClusterSection::default().security(),
            EtcdSecurity::default()
        );
        let c = ClusterSection {
            user: "u".into(),
            ca_file: "/ca.pem".into(),
            ..ClusterSection::default()
        };
        let s = c.security();
        assert_eq!(s.user.as_deref(), Some("u"));
        assert_eq!(s.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(s.cert_file, None);
    }
}
