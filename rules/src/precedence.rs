//! Which rules a 5-tuple matches, and in which order they rank: the
//! reference the data plane's tables answer for (`cfdp ctl trace` lists
//! every match in this order; the first is the one the data plane applies).
//!
//! The order: exact flows first, then single-prefix rules by their class
//! (longest prefix, then protocol and port before protocol alone before
//! neither, destination before source: `PrefixClass::rank`), then the
//! multi-field rules by priority (highest first, ties to the lower id).

use std::cmp::Reverse;

use crate::{FlowKey, Match, PrefixClass, Rule};

/// A rule's place in the order (smaller first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precedence {
    Flow,
    Prefix((u8, u8, u8)),
    Acl(Reverse<u32>, u32),
}

impl Match {
    /// Whether a packet with this 5-tuple matches (a later fragment's key
    /// carries its first fragment's ports).
    pub fn matches(&self, k: &FlowKey) -> bool {
        match self {
            Match::Flow(f) => f.key() == k,
            Match::Acl { m, .. } => m.matches(k),
            Match::Prefix(_) => {
                PrefixClass::of(self).is_some_and(|(c, addr)| c.admits(k) && c.masked(k) == addr)
            }
        }
    }
}

impl Rule {
    /// This rule's place in the order between matching rules.
    pub fn precedence(&self) -> Precedence {
        match &self.matcher {
            Match::Flow(_) => Precedence::Flow,
            Match::Acl { priority, .. } => Precedence::Acl(Reverse(*priority), self.id),
            m @ Match::Prefix(_) => Precedence::Prefix(
                PrefixClass::of(m).map_or((u8::MAX, u8::MAX, u8::MAX), |(c, _)| c.rank()),
            ),
        }
    }
}

/// Every rule of `rules` that `k` matches, in precedence order (the first
/// one is the rule the data plane applies).
pub fn matching(rules: impl IntoIterator<Item = Rule>, k: &FlowKey) -> Vec<Rule> {
    let mut v: Vec<Rule> = rules.into_iter().filter(|r| r.matcher.matches(k)).collect();
    v.sort_by_key(Rule::precedence);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_rule_list;

    #[test]
    fn every_form_matches_and_ranks() {
        let rules = parse_rule_list(
            r#"[
            {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"},
            {"id": 2, "match": {"dst_prefix": "10.1.0.0/16", "proto": "udp", "port": 53}, "action": "drop"},
            {"id": 3, "match": {"flow": {"src": "192.0.2.1", "dst": "10.1.2.3", "proto": "udp", "sport": 999, "dport": 53}}, "action": "count"},
            {"id": 4, "priority": 5, "match": {"src_prefix": "192.0.2.0/24", "dst_prefix": "10.0.0.0/8", "dport": "50-60"}, "action": "drop"},
            {"id": 5, "priority": 9, "match": {"src_prefix": "0.0.0.0/0", "dst_prefix": "10.1.0.0/16"}, "action": "allow"},
            {"id": 6, "match": {"src_prefix": "198.51.100.0/24"}, "action": "drop"}
        ]"#,
        )
        .unwrap();
        let k = FlowKey::v4([192, 0, 2, 1], [10, 1, 2, 3], 17, 999, 53);
        let ids: Vec<u32> = matching(rules.iter().copied(), &k)
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [3, 2, 1, 5, 4]);
        let other = FlowKey::v4([192, 0, 2, 1], [10, 1, 2, 3], 6, 999, 80);
        let ids: Vec<u32> = matching(rules.iter().copied(), &other)
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [1, 5]);
    }
}
