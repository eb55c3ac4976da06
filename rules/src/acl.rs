//! Multi-field rules with priorities: a source and a destination prefix
//! (IPv4 or IPv6; `/0` is any), a protocol (one value, or any), and a
//! source and a destination port range (inclusive; `0..=65535` is any). The
//! highest priority wins; at equal priority the lower id wins, so every
//! packet has exactly one answer.
//!
//! This is the rule language of ACLs and SDN tables (ClassBench's sets,
//! P4Runtime's ternary and range matches); [`crate::codec::classbench`] reads
//! ClassBench's filter and trace files.

use crate::acl_match::AclMatch;
use crate::flow::FlowKey;
use crate::rule::{Action, RuleId};

/// A multi-field rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclRule {
    pub id: RuleId,
    /// Higher wins.
    pub priority: u32,
    pub matcher: AclMatch,
    pub action: Action,
}

impl AclRule {
    /// Whether this rule beats `other` for a packet both match: the higher
    /// priority, then the lower id.
    #[inline]
    pub fn beats(&self, other: &AclRule) -> bool {
        (self.priority, std::cmp::Reverse(self.id)) > (other.priority, std::cmp::Reverse(other.id))
    }
}

impl AclRule {
    /// The same rule in cfdp's rule model.
    pub fn to_rule(&self) -> crate::rule::Rule {
        crate::rule::Rule {
            id: self.id,
            matcher: crate::rule::Match::Acl {
                m: self.matcher,
                priority: self.priority,
            },
            action: self.action,
        }
    }

    /// A multi-field rule of cfdp's rule model as the classifier takes it.
    pub fn of(r: &crate::rule::Rule) -> Option<AclRule> {
        match r.matcher {
            crate::rule::Match::Acl { m, priority } => Some(AclRule {
                id: r.id,
                priority,
                matcher: m,
                action: r.action,
            }),
            _ => None,
        }
    }
}

/// The winner among `rules` for `k` by a plain scan: the reference every
/// classifier is checked against.
pub fn first_match<'a>(rules: &'a [AclRule], k: &FlowKey) -> Option<&'a AclRule> {
    rules
        .iter()
        .filter(|r| r.matcher.matches(k))
        .fold(None, |best: Option<&AclRule>, r| match best {
            Some(b) if !r.beats(b) => Some(b),
            _ => Some(r),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl_match::PortRange;

    #[test]
    fn ties_go_to_the_lower_id() {
        let m = AclMatch::new(
            "10.0.0.0/8".parse().unwrap(),
            "0.0.0.0/0".parse().unwrap(),
            None,
            PortRange::ANY,
            PortRange::ANY,
        )
        .unwrap();
        let a = AclRule {
            id: 7,
            priority: 5,
            matcher: m,
            action: Action::Drop,
        };
        let b = AclRule { id: 3, ..a };
        assert!(b.beats(&a) && !a.beats(&b));
        let k = FlowKey::new(
            "10.1.1.1".parse().unwrap(),
            "1.1.1.1".parse().unwrap(),
            6,
            1,
            2,
        );
        assert_eq!(first_match(&[a, b], &k).unwrap().id, 3);
        assert_eq!(first_match(&[b, a], &k).unwrap().id, 3);
    }
}
