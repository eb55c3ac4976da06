//! A multi-field classifier with priorities: tuple space search over a few
//! merged tuples, each table a hash table of masked keys.
//!
//! Every rule lives in one table whose *tuple* (source prefix length,
//! destination prefix length, whether the protocol is part of the key) is
//! no more specific than the rule itself, as TupleMerge does (Daly, Liu,
//! Torng, "A Difference Resolution Approach to Compressing Access Control
//! Lists", and "TupleMerge: Fast Software Packet Processing for Online
//! Packet Classification", IEEE/ACM ToN 2019): a table's key keeps only
//! the tuple's bits, so rules of many shapes share one table, and a hit is
//! verified against the rule's own fields (ports and the bits the tuple
//! left out). Ports never enter the key: ranges cost no expansion.
//!
//! * A new rule goes into the most specific existing table it fits within
//!   [`RELAX`] bits per prefix, else into a new table whose tuple is the
//!   rule's lengths rounded down to a multiple of [`ROUND`] bits; a bucket
//!   that would exceed [`MAX_BUCKET`] rules sends the rule to a table of its
//!   exact shape instead (rules that differ only in ports share a bucket
//!   whatever its tuple, so a bucket can still grow: such rules are sorted
//!   and the scan stops at the first match).
//! * At most [`MAX_TABLES`] tables per address family: past it a rule goes
//!   into the most specific table it fits, so a crafted rule set cannot make
//!   a packet probe more tables (the Tuple Space Explosion attack).
//! * Tables are ordered by the highest priority they hold (OVS
//!   `classifier.c`); a lookup stops as soon as no later table can beat the
//!   best match found. A bucket keeps its rules best first, so its scan
//!   stops at its first match.
//!
//! Updates touch one table: insert and delete are a hash-table operation
//! plus a sorted insert into one bucket (no rebuild).

use std::collections::BTreeMap;

use cfdp_rules::{AclRule, FlowKey, RuleId};
use hashbrown::HashMap;

/// Largest prefix-length difference between a rule and the table that
/// takes it.
pub const RELAX: u8 = 4;
/// New tables round the rule's prefix lengths down to a multiple of this.
pub const ROUND: u8 = 4;
/// Rules one bucket takes before a rule goes to a table of its own shape.
pub const MAX_BUCKET: usize = 12;
/// Most tables per address family.
pub const MAX_TABLES: usize = 32;

/// A table's shape: the key bits it hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub v6: bool,
    pub src_len: u8,
    pub dst_len: u8,
    /// The protocol is part of the key (every rule here names one).
    pub proto: bool,
}

impl Tuple {
    /// Whether a rule of shape `r` can live in a table of this shape.
    fn admits(&self, r: &Tuple) -> bool {
        self.v6 == r.v6
            && self.src_len <= r.src_len
            && self.dst_len <= r.dst_len
            && (!self.proto || r.proto)
    }

    fn specificity(&self) -> u16 {
        u16::from(self.src_len) + u16::from(self.dst_len) + u16::from(self.proto) * 8
    }

    fn of(r: &AclRule) -> Tuple {
        Tuple {
            v6: r.matcher.v6(),
            src_len: r.matcher.src.len,
            dst_len: r.matcher.dst.len,
            proto: r.matcher.proto.is_some(),
        }
    }
}

/// The bits of a packet (or rule) a table hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Masked {
    src: u128,
    dst: u128,
    proto: u8,
}

#[inline]
fn addr(a: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*a)
}

/// The first `len` bits of a 128-bit address word (IPv4 addresses sit in
/// the top 32 bits).
#[inline]
fn prefix_mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// One table: rules of shapes its tuple admits, bucketed by masked key.
struct Table {
    tuple: Tuple,
    src_mask: u128,
    dst_mask: u128,
    buckets: HashMap<Masked, Vec<AclRule>>,
    /// Priorities held, with their counts: the maximum in O(log n) after a
    /// delete.
    priorities: BTreeMap<u32, u32>,
    rules: usize,
}

impl Table {
    fn new(tuple: Tuple) -> Self {
        Self {
            tuple,
            src_mask: prefix_mask(tuple.src_len),
            dst_mask: prefix_mask(tuple.dst_len),
            buckets: HashMap::new(),
            priorities: BTreeMap::new(),
            rules: 0,
        }
    }

    fn max_priority(&self) -> Option<u32> {
        self.priorities.keys().next_back().copied()
    }

    #[inline]
    fn key_of(&self, src: u128, dst: u128, proto: u8) -> Masked {
        Masked {
            src: src & self.src_mask,
            dst: dst & self.dst_mask,
            proto: if self.tuple.proto { proto } else { 0 },
        }
    }

    fn rule_key(&self, r: &AclRule) -> Masked {
        let m = &r.matcher;
        self.key_of(addr(&m.src.addr), addr(&m.dst.addr), m.proto.unwrap_or(0))
    }

    fn bucket_len(&self, r: &AclRule) -> usize {
        self.buckets.get(&self.rule_key(r)).map_or(0, Vec::len)
    }

    fn insert(&mut self, r: AclRule) {
        let b = self.buckets.entry(self.rule_key(&r)).or_default();
        // Best first: a scan stops at its first match.
        let at = b.partition_point(|x| x.beats(&r));
        b.insert(at, r);
        *self.priorities.entry(r.priority).or_default() += 1;
        self.rules += 1;
    }

    fn remove(&mut self, r: &AclRule) -> bool {
        let key = self.rule_key(r);
        let Some(b) = self.buckets.get_mut(&key) else {
            return false;
        };
        let Some(i) = b.iter().position(|x| x.id == r.id) else {
            return false;
        };
        b.remove(i);
        if b.is_empty() {
            self.buckets.remove(&key);
        }
        if let Some(n) = self.priorities.get_mut(&r.priority) {
            *n -= 1;
            if *n == 0 {
                self.priorities.remove(&r.priority);
            }
        }
        self.rules -= 1;
        true
    }

    /// The best rule of this table matching `k`.
    #[inline]
    fn lookup(&self, k: &FlowKey, src: u128, dst: u128) -> Option<&AclRule> {
        let b = self.buckets.get(&self.key_of(src, dst, k.proto))?;
        b.iter().find(|r| r.matcher.matches(k))
    }

    fn bytes(&self) -> usize {
        let entry = std::mem::size_of::<(Masked, Vec<AclRule>)>() + 1;
        self.buckets.capacity() * entry
            + self
                .buckets
                .values()
                .map(|b| b.capacity() * std::mem::size_of::<AclRule>())
                .sum::<usize>()
            + self.priorities.len() * 32
    }
}

/// Why a rule could not be added or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("rule id {0} exists")]
    IdTaken(RuleId),
    #[error("no rule with id {0}")]
    NotFound(RuleId),
    #[error("rule id {0}: the source and destination prefixes are of different families")]
    MixedFamilies(RuleId),
}

/// Counters of one lookup pass, for the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub packets: u64,
    pub tables: u64,
}

/// The classifier: tables of both families, ordered by the highest
/// priority they hold.
#[derive(Default)]
pub struct AclClassifier {
    tables: Vec<Table>,
    /// Each rule's table (by tuple) and the rule itself.
    by_id: HashMap<RuleId, (Tuple, AclRule)>,
}

impl AclClassifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// A classifier holding `rules` (ids must be unique).
    pub fn with_rules(rules: &[AclRule]) -> Result<Self, AclError> {
        let mut c = Self::new();
        // Best first: the tables a set's first rules open are the ones
        // most packets stop in.
        let mut order: Vec<&AclRule> = rules.iter().collect();
        order.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        for r in order {
            c.insert(*r)?;
        }
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Tables in use.
    pub fn tables(&self) -> usize {
        self.tables.len()
    }

    /// The tuples in probe order.
    pub fn tuples(&self) -> Vec<Tuple> {
        self.tables.iter().map(|t| t.tuple).collect()
    }

    /// Heap bytes of the tables and the id index.
    pub fn bytes(&self) -> usize {
        self.tables.iter().map(Table::bytes).sum::<usize>()
            + self.by_id.capacity() * (std::mem::size_of::<(RuleId, (Tuple, AclRule))>() + 1)
    }

    pub fn rule(&self, id: RuleId) -> Option<&AclRule> {
        self.by_id.get(&id).map(|(_, r)| r)
    }

    /// Adds a rule to the table it fits best (see the module docs).
    pub fn insert(&mut self, r: AclRule) -> Result<(), AclError> {
        if r.matcher.src.v6 != r.matcher.dst.v6 {
            return Err(AclError::MixedFamilies(r.id));
        }
        if self.by_id.contains_key(&r.id) {
            return Err(AclError::IdTaken(r.id));
        }
        let i = self.table_for(&r);
        self.tables[i].insert(r);
        let tuple = self.tables[i].tuple;
        self.by_id.insert(r.id, (tuple, r));
        self.reorder(i);
        Ok(())
    }

    /// Removes rule `id`.
    pub fn remove(&mut self, id: RuleId) -> Result<AclRule, AclError> {
        let (tuple, r) = self.by_id.remove(&id).ok_or(AclError::NotFound(id))?;
        let i = self
            .tables
            .iter()
            .position(|t| t.tuple == tuple)
            .expect("a rule's table exists");
        let removed = self.tables[i].remove(&r);
        debug_assert!(removed, "the index and the table agree");
        if self.tables[i].rules == 0 {
            self.tables.remove(i);
        } else {
            self.reorder(i);
        }
        Ok(r)
    }

    /// The index of the table `r` goes into, creating it when needed.
    fn table_for(&mut self, r: &AclRule) -> usize {
        let shape = Tuple::of(r);
        let fits = |t: &Table| t.tuple.admits(&shape);
        let close = |t: &Table| {
            shape.src_len - t.tuple.src_len <= RELAX && shape.dst_len - t.tuple.dst_len <= RELAX
        };
        let best = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| fits(t) && close(t) && t.bucket_len(r) < MAX_BUCKET)
            .max_by_key(|(_, t)| t.tuple.specificity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return i;
        }
        let family = self
            .tables
            .iter()
            .filter(|t| t.tuple.v6 == shape.v6)
            .count();
        // The last table a family may open is its catch-all, which every
        // rule of the family fits: the bound holds whatever comes next.
        let full = family + 1 >= MAX_TABLES;
        if full {
            // Bounded: the most specific table it fits, however far.
            if let Some((i, _)) = self
                .tables
                .iter()
                .enumerate()
                .filter(|(_, t)| fits(t))
                .max_by_key(|(_, t)| t.tuple.specificity())
            {
                return i;
            }
            // None fits: the family's catch-all, which always does.
        }
        let crowded = self
            .tables
            .iter()
            .any(|t| fits(t) && close(t) && t.bucket_len(r) >= MAX_BUCKET);
        let tuple = if full {
            Tuple {
                v6: shape.v6,
                src_len: 0,
                dst_len: 0,
                proto: false,
            }
        } else if crowded {
            shape
        } else {
            Tuple {
                src_len: shape.src_len - shape.src_len % ROUND,
                dst_len: shape.dst_len - shape.dst_len % ROUND,
                ..shape
            }
        };
        if let Some(i) = self.tables.iter().position(|t| t.tuple == tuple) {
            return i;
        }
        self.tables.push(Table::new(tuple));
        self.tables.len() - 1
    }

    /// Moves table `i` to its place in the order (highest priority held
    /// first).
    fn reorder(&mut self, i: usize) {
        let key = |t: &Table| std::cmp::Reverse(t.max_priority());
        let t = self.tables.remove(i);
        let at = self.tables.partition_point(|x| key(x) <= key(&t));
        self.tables.insert(at, t);
    }

    /// The winning rule for one packet.
    #[inline]
    pub fn classify(&self, k: &FlowKey) -> Option<&AclRule> {
        self.classify_counted(k, &mut Probes::default())
    }

    /// [`Self::classify`], counting the tables probed.
    #[inline]
    pub fn classify_counted(&self, k: &FlowKey, probes: &mut Probes) -> Option<&AclRule> {
        let (src, dst) = (addr(&k.src), addr(&k.dst));
        let mut best: Option<&AclRule> = None;
        probes.packets += 1;
        for t in &self.tables {
            let top = t.max_priority().unwrap_or(0);
            if best.is_some_and(|b| b.priority > top) {
                break;
            }
            if t.tuple.v6 != k.v6 {
                continue;
            }
            probes.tables += 1;
            if let Some(r) = t.lookup(k, src, dst) {
                if best.is_none_or(|b| r.beats(b)) {
                    best = Some(r);
                }
            }
        }
        best
    }

    /// The winning rule's id for each key of a burst (`None`: no rule).
    pub fn classify_burst(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.classify(k).map(|r| r.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::acl::first_match;
    use cfdp_rules::{AclMatch, Action, IpPrefix, PortRange};

    fn rule(
        id: u32,
        prio: u32,
        src: &str,
        dst: &str,
        proto: Option<u8>,
        dport: (u16, u16),
    ) -> AclRule {
        AclRule {
            id,
            priority: prio,
            matcher: AclMatch {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                proto,
                sport: PortRange::ANY,
                dport: PortRange::new(dport.0, dport.1).unwrap(),
            },
            action: Action::Drop,
        }
    }

    fn key(src: &str, dst: &str, proto: u8, dport: u16) -> FlowKey {
        FlowKey::new(
            src.parse().unwrap(),
            dst.parse().unwrap(),
            proto,
            1234,
            dport,
        )
    }

    #[test]
    fn the_highest_priority_wins_across_tables_and_ties_go_to_the_lower_id() {
        let rules = [
            rule(1, 10, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)),
            rule(2, 20, "10.1.0.0/16", "192.168.0.0/16", Some(6), (80, 80)),
            rule(3, 20, "10.1.2.0/24", "192.168.1.0/24", Some(6), (0, 65535)),
            rule(4, 5, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535)),
        ];
        let c = AclClassifier::with_rules(&rules).unwrap();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        // 2 and 3 both match at priority 20: the lower id.
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.classify(&key("10.1.2.3", "192.168.1.9", 6, 81))
                .unwrap()
                .id,
            3
        );
        assert_eq!(
            c.classify(&key("10.9.9.9", "1.1.1.1", 17, 53)).unwrap().id,
            1
        );
        assert_eq!(
            c.classify(&key("11.0.0.1", "1.1.1.1", 17, 53)).unwrap().id,
            4
        );
    }

    #[test]
    fn updates_change_answers_without_a_rebuild() {
        let mut c = AclClassifier::new();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        assert!(c.classify(&k).is_none());
        c.insert(rule(1, 1, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)))
            .unwrap();
        c.insert(rule(
            2,
            9,
            "10.1.2.0/24",
            "192.168.1.0/24",
            Some(6),
            (80, 80),
        ))
        .unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.insert(rule(2, 3, "1.0.0.0/8", "0.0.0.0/0", None, (0, 65535))),
            Err(AclError::IdTaken(2))
        );
        c.remove(2).unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 1);
        c.remove(1).unwrap();
        assert!(c.classify(&k).is_none());
        assert_eq!((c.tables(), c.len()), (0, 0));
        assert_eq!(c.remove(1), Err(AclError::NotFound(1)));
    }

    #[test]
    fn a_crafted_set_of_many_shapes_stays_within_the_table_bound() {
        // Every (source, destination) length pair: 33 × 33 shapes.
        let mut rules = Vec::new();
        for s in 0..=32u8 {
            for d in 0..=32u8 {
                let id = u32::from(s) * 33 + u32::from(d) + 1;
                let src = IpPrefix {
                    v6: false,
                    addr: IpPrefix::mask(
                        false,
                        &[10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        s,
                    ),
                    len: s,
                };
                let dst = IpPrefix {
                    v6: false,
                    addr: IpPrefix::mask(
                        false,
                        &[20, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        d,
                    ),
                    len: d,
                };
                let mut r = rule(id, id, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535));
                r.matcher.src = src;
                r.matcher.dst = dst;
                rules.push(r);
            }
        }
        let c = AclClassifier::with_rules(&rules).unwrap();
        assert!(c.tables() <= MAX_TABLES, "{} tables", c.tables());
        for k in [
            key("10.1.2.3", "20.1.2.3", 6, 1),
            key("10.1.2.4", "20.1.3.3", 6, 1),
            key("9.1.2.3", "20.1.2.3", 6, 1),
        ] {
            assert_eq!(
                c.classify(&k).map(|r| r.id),
                first_match(&rules, &k).map(|r| r.id)
            );
        }
    }
}
