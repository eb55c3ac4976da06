//! A validated rule set, its priority order, and the exact classifier.
//!
//! # Priority (documented and deterministic)
//!
//! 1. An exact flow rule matching the packet's 5-tuple.
//! 2. Otherwise the prefix rule with the **longest** prefix that contains the
//!    packet's source (for `src_prefix`) or destination (for `dst_prefix`)
//!    address and whose optional protocol and destination port match.
//! 3. Between prefix rules of equal length: the more specific first
//!    (protocol and port, then protocol only, then neither); then
//!    `dst_prefix` before `src_prefix`.
//! 4. Otherwise no rule: the packet is forwarded (default allow).
//!
//! Two rules with the same match are refused (one would never apply), so
//! the order above always names exactly one rule.
//!
//! The exact tables here are the ground truth: the data plane's filters
//! answer "maybe", and in `verify` mode every positive is confirmed here.

// hashbrown with its default foldhash hasher (randomly seeded per map):
// several times faster than std's SipHash on these short keys, which matters
// because every verified filter positive probes one of these tables.
use hashbrown::HashMap;

use crate::flow::FlowKey;
use crate::prefix::IpPrefix;
use crate::rule::{Action, Dir, Match, Rule, RuleError, RuleId};

/// Index of a rule inside its [`RuleSet`] (dense, 0-based).
pub type RuleIndex = u32;

/// One (family, direction, length, protocol, port) combination in use: the
/// unit the data plane keeps one filter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrefixClass {
    pub v6: bool,
    pub dir: Dir,
    pub len: u8,
    pub proto: Option<u8>,
    pub port: Option<u16>,
}

impl PrefixClass {
    /// The class of a prefix rule's match and its (masked) address; `None`
    /// for an exact flow match.
    pub fn of(m: &Match) -> Option<(Self, [u8; 16])> {
        match *m {
            Match::Flow(_) => None,
            Match::Prefix {
                dir,
                prefix,
                proto,
                port,
            } => Some((
                PrefixClass {
                    v6: prefix.v6,
                    dir,
                    len: prefix.len,
                    proto,
                    port,
                },
                prefix.addr,
            )),
        }
    }

    /// Priority key: smaller sorts first.
    pub fn rank(&self) -> (u8, u8, u8) {
        let specificity = match (self.proto, self.port) {
            (Some(_), Some(_)) => 0,
            (Some(_), None) => 1,
            _ => 2,
        };
        let dir = match self.dir {
            Dir::Dst => 0,
            Dir::Src => 1,
        };
        (u8::MAX - self.len, specificity, dir)
    }

    /// Whether the packet's protocol and port satisfy this class.
    #[inline]
    pub fn admits(&self, k: &FlowKey) -> bool {
        k.v6 == self.v6
            && self.proto.is_none_or(|p| p == k.proto)
            && self.port.is_none_or(|p| p == k.dport)
    }

    /// The packet's address this class looks at, masked to its length.
    #[inline]
    pub fn masked(&self, k: &FlowKey) -> [u8; 16] {
        let a = match self.dir {
            Dir::Src => &k.src,
            Dir::Dst => &k.dst,
        };
        IpPrefix::mask(self.v6, a, self.len)
    }

    /// The 64-bit hash of a masked address in this class's filter.
    #[inline]
    pub fn hash_masked(&self, masked: &[u8; 16]) -> u64 {
        let n = if self.v6 { 16 } else { 4 };
        cfdp_filter::hash::hash_bytes(&masked[..n])
    }
}

/// The exact table of one prefix class.
#[derive(Clone, Debug)]
pub struct ClassTable {
    pub class: PrefixClass,
    pub entries: HashMap<[u8; 16], RuleIndex>,
}

/// Rules, indexed for exact classification.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    by_id: HashMap<RuleId, RuleIndex>,
    exact: HashMap<FlowKey, RuleIndex>,
    /// In priority order (see the module docs).
    classes: Vec<ClassTable>,
}

impl RuleSet {
    /// Builds a rule set; refuses duplicate ids and duplicate matches.
    pub fn new(rules: Vec<Rule>) -> Result<Self, RuleError> {
        let mut set = RuleSet::default();
        let mut class_idx: HashMap<PrefixClass, usize> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            let idx = i as RuleIndex;
            if let Some(&other) = set.by_id.get(&r.id) {
                return Err(RuleError::new(
                    Some(i),
                    Some(r.id.into()),
                    "id",
                    format!("duplicate id (also rule #{})", other + 1),
                ));
            }
            set.by_id.insert(r.id, idx);
            let dup = |other: RuleIndex| {
                RuleError::new(
                    Some(i),
                    Some(r.id.into()),
                    "match",
                    format!("same match as rule id {}", rules[other as usize].id),
                )
            };
            match r.matcher {
                Match::Flow(k) => {
                    if let Some(&o) = set.exact.get(&k) {
                        return Err(dup(o));
                    }
                    set.exact.insert(k, idx);
                }
                Match::Prefix { .. } => {
                    let (class, addr) = PrefixClass::of(&r.matcher).expect("a prefix match");
                    let ci = *class_idx.entry(class).or_insert_with(|| {
                        set.classes.push(ClassTable {
                            class,
                            entries: HashMap::new(),
                        });
                        set.classes.len() - 1
                    });
                    if let Some(&o) = set.classes[ci].entries.get(&addr) {
                        return Err(dup(o));
                    }
                    set.classes[ci].entries.insert(addr, idx);
                }
            }
        }
        set.classes.sort_by_key(|c| c.class.rank());
        set.rules = rules;
        Ok(set)
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rule(&self, idx: RuleIndex) -> &Rule {
        &self.rules[idx as usize]
    }

    pub fn index_of(&self, id: RuleId) -> Option<RuleIndex> {
        self.by_id.get(&id).copied()
    }

    /// Exact flow rules: key → rule index.
    pub fn exact(&self) -> &HashMap<FlowKey, RuleIndex> {
        &self.exact
    }

    /// Prefix classes in priority order.
    pub fn classes(&self) -> &[ClassTable] {
        &self.classes
    }

    /// The rule that applies to a packet, by the documented priority, from
    /// the exact tables alone (the reference the filters are checked against).
    pub fn classify(&self, k: &FlowKey) -> Option<RuleIndex> {
        if let Some(&i) = self.exact.get(k) {
            return Some(i);
        }
        self.classes
            .iter()
            .filter(|c| c.class.admits(k))
            .find_map(|c| c.entries.get(&c.class.masked(k)).copied())
    }

    /// Action for a packet (`None`: no rule; forwarded).
    pub fn action(&self, k: &FlowKey) -> Option<Action> {
        self.classify(k).map(|i| self.rule(i).action)
    }
}
