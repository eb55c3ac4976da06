//! Where the fleet's state lives in etcd, under its prefix P:
//!
//! | key | value |
//! |---|---|
//! | `P/rules/0000000042` | rule 42 as its rule-file JSON (canonical form) |
//! | `P/matches/{match JSON}` | the id of the rule that has this match (the index that makes "a match is used once" a transaction compare) |
//! | `P/generation` | touched by every batch: its mod revision is the fleet's generation |
//! | `P/nodes/{node}` | a live node's status, under the node's lease (gone when the node is) |
//! | `P/seen/{node}` | the last status of every node ever seen (no lease) |

use crate::error::ClusterError;
use cfdp_rules::{rule_to_json, Rule, RuleId};

/// The key layout of one fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `prefix` must start with `/`; a trailing `/` is dropped.
    pub fn new(prefix: &str) -> Result<Self, ClusterError> {
        let p = prefix.trim_end_matches('/');
        if !p.starts_with('/') || p.len() < 2 {
            return Err(ClusterError::BadPrefix(prefix.to_string()));
        }
        Ok(Self { prefix: p.into() })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn rules_prefix(&self) -> String {
        format!("{}/rules/", self.prefix)
    }

    /// Zero-padded, so keys list in id order.
    pub fn rule(&self, id: RuleId) -> String {
        format!("{}/rules/{id:010}", self.prefix)
    }

    /// The rule id of a key under [`Keys::rules_prefix`].
    pub fn rule_id(&self, key: &str) -> Option<RuleId> {
        key.strip_prefix(&self.rules_prefix())?.parse().ok()
    }

    pub fn match_key(&self, canonical_match: &str) -> String {
        format!("{}/matches/{canonical_match}", self.prefix)
    }

    pub fn generation(&self) -> String {
        format!("{}/generation", self.prefix)
    }

    pub fn nodes_prefix(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }

    pub fn node(&self, name: &str) -> String {
        format!("{}/nodes/{name}", self.prefix)
    }

    pub fn seen_prefix(&self) -> String {
        format!("{}/seen/", self.prefix)
    }

    pub fn seen(&self, name: &str) -> String {
        format!("{}/seen/{name}", self.prefix)
    }
}

/// A rule's canonical JSON text (stored as its value) and its match's
/// canonical JSON text (the suffix of its match key). serde_json's maps
/// are sorted, so equal rules give equal text however they were written.
pub fn canonical(rule: &Rule) -> (String, String) {
    let v = rule_to_json(rule);
    // Multi-field rules may share a match at different priorities: their
    // match key is the pair.
    let m = match v.get("priority") {
        Some(p) => format!("{p}/{}", v["match"]),
        None => v["match"].to_string(),
    };
    (v.to_string(), m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::parse_rule;
    use serde_json::json;

    #[test]
    fn keys_and_canonical_forms() {
        let k = Keys::new("/cfdp/prod/").unwrap();
        assert_eq!(k.rule(42), "/cfdp/prod/rules/0000000042");
        assert_eq!(k.rule_id("/cfdp/prod/rules/0000000042"), Some(42));
        assert_eq!(k.rule_id("/cfdp/prod/matches/x"), None);
        assert!(Keys::new("cfdp").is_err());
        assert!(Keys::new("/").is_err());
        // Field order and spelling in the input do not change the forms.
        let a = parse_rule(
            &json!({"id": 1, "action": "drop", "match": {"flow": {"dport": 80, "src": "10.0.0.1",
                "dst": "10.0.0.2", "proto": "tcp", "sport": 40000}}}),
            None,
        )
        .unwrap();
        let b = parse_rule(
            &json!({"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2",
                "proto": 6, "sport": 40000, "dport": 80}}, "action": "drop"}),
            None,
        )
        .unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        let (rule, m) = canonical(&a);
        assert_eq!(
            parse_rule(&serde_json::from_str(&rule).unwrap(), None).unwrap(),
            a
        );
        assert!(m.starts_with("{\"flow\""), "{m}");
    }
}
