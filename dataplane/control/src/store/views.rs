//! Read-only answers about the rule set: rules, counters, filter
//! statistics, names.

use std::collections::BTreeMap;

use std::sync::Arc;

use cfdp_engine::LiveStats;
use cfdp_filter::Filter;
use cfdp_rules::{Match, PrefixClass, Rule, RuleId};
use serde::Serialize;

use super::state::RuleStore;
use super::types::Domain;

pub use cfdp_engine::RuleCount;

/// A `count` rule's counter slot and the slot's totals when the rule got it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountSlot {
    pub id: RuleId,
    pub slot: u32,
    pub baseline: (u64, u64),
}

impl CountSlot {
    /// The rule's packets and bytes since it was installed.
    pub fn read(&self, live: &LiveStats) -> RuleCount {
        let (p, b) = live.slot_totals(self.slot);
        RuleCount {
            id: self.id,
            packets: p.saturating_sub(self.baseline.0),
            bytes: b.saturating_sub(self.baseline.1),
        }
    }
}

/// One filter's statistics.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OneFilter {
    pub items: usize,
    pub entries: usize,
    pub bloom_items: usize,
    pub buckets: usize,
    pub fingerprint_bits: u32,
    pub load_factor: f64,
    pub estimated_fpr: f64,
    pub memory_bytes: usize,
}

/// The filters' statistics, summed and per filter (`flow`, then one per
/// prefix class by [`class_name`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FilterStats {
    pub items: usize,
    pub bloom_items: usize,
    /// Occupied cuckoo entries / all entries.
    pub occupancy: f64,
    pub memory_bytes: usize,
    /// A packet probes the flow filter and every admitting class filter:
    /// the sum bounds its false-positive probability.
    pub estimated_fpr_sum: f64,
    pub filters: BTreeMap<String, OneFilter>,
}

/// Where the rule set's memory goes, in heap bytes (`stats` → `memory`).
/// Computed from the structures' capacities, not sampled from the
/// allocator: it is what the rules cost, whatever else the process holds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct MemoryStats {
    /// The store's rule array (by counter slot) and id index.
    pub rule_store: usize,
    /// Both left-right copies of the exact tables (and, in filter-only
    /// mode, of the slot array) the workers read.
    pub tables: usize,
    /// The filters' tables (shared by both copies). Not counted: the side
    /// table of items in a Bloom part awaiting migration (empty after a
    /// load; bounded by the Bloom part's size otherwise).
    pub filters: usize,
    /// Every worker's per-rule packet and byte counters.
    pub rule_counters: usize,
    /// Counter baselines of recycled slots, the `count` rule index and the
    /// free-slot list.
    pub other: usize,
    pub total: usize,
    /// `total / rules` (0 without rules).
    pub bytes_per_rule: f64,
}

impl RuleStore {
    /// Heap memory of the rule set by component.
    pub fn memory(&self) -> MemoryStats {
        let (shared, own) = self
            .w
            .enter()
            .map_or((0, 0), |t| (t.shared_memory_bytes(), t.own_memory_bytes()));
        let mut m = MemoryStats {
            rule_store: self.rules.memory_bytes(),
            // The exact tables' bases are shared by both copies; each copy
            // holds the same changes since (it replays the same
            // operations): the published one's, twice.
            tables: shared + 2 * own,
            filters: self.filters().map(|(_, f)| f.stats().memory_bytes).sum(),
            rule_counters: self.stats.rule_counter_bytes(),
            other: self.slots.memory_bytes() + self.count_rules.memory_bytes(),
            ..MemoryStats::default()
        };
        m.total = m.rule_store + m.tables + m.filters + m.rule_counters + m.other;
        if !self.rules.is_empty() {
            m.bytes_per_rule = m.total as f64 / self.rules.len() as f64;
        }
        m
    }

    /// Every rule, sorted by id.
    pub fn rules(&self) -> Vec<Rule> {
        let mut v: Vec<Rule> = self.iter().collect();
        v.sort_by_key(|r| r.id);
        v
    }

    /// A page of the rule set in id order: after id `after` (O(log N +
    /// limit)), or from the `offset`-th rule (O(offset + limit)).
    pub fn rules_page(&mut self, after: Option<RuleId>, offset: usize, limit: usize) -> Vec<Rule> {
        self.rules.page(after, offset, limit)
    }

    /// Every rule, in no particular order (no copy of the whole set).
    pub fn iter(&self) -> impl Iterator<Item = Rule> + '_ {
        self.rules.iter().map(|s| s.rule)
    }

    /// The committed rule with match `m` (a P4Runtime table entry is named
    /// by its match and priority, not by an id): in filter-only mode from
    /// the rule set's own match index; otherwise between batches the
    /// published tables are the committed rule set.
    pub fn rule_with_match(&self, m: &Match) -> Option<Rule> {
        if self.rules.indexes_matches() {
            return self.rules.by_match(m).map(|s| s.rule);
        }
        self.w
            .enter()
            .and_then(|t| t.rule_slot_of(m))
            .and_then(|slot| self.rules.at(slot))
    }

    pub fn rule(&self, id: RuleId) -> Option<Rule> {
        self.rules.get(id).map(|s| s.rule)
    }

    /// The counter slot of rule `id`, if committed.
    pub fn slot_of(&self, id: RuleId) -> Option<u32> {
        self.rules.get(id).map(|s| s.slot)
    }

    /// The committed rule holding counter slot `slot` (what a worker's
    /// `RuleRef` points to).
    pub fn rule_at_slot(&self, slot: u32) -> Option<Rule> {
        self.rules.at(slot)
    }

    /// Packets and bytes of every `count` rule since it was installed,
    /// sorted by id.
    pub fn count_rule_counters(&self) -> Vec<RuleCount> {
        self.count_rule_slots()
            .iter()
            .map(|c| c.read(&self.stats))
            .collect()
    }

    /// Packets and bytes that matched rule `id` since it was installed.
    pub fn rule_counters(&self, id: RuleId) -> Option<(u64, u64)> {
        let s = self.rules.get(id)?;
        let (p, b) = self.stats.slot_totals(s.slot);
        let (bp, bb) = self.slots.baseline(s.slot);
        Some((p.saturating_sub(bp), b.saturating_sub(bb)))
    }

    /// Unix seconds of rule `id`'s last matched packet, `None` if none yet
    /// (a `modify` keeps the rule's slot: counters and last hit carry on).
    pub fn rule_last_hit_unix_s(&self, id: RuleId) -> Option<u64> {
        self.rules
            .get(id)
            .and_then(|s| self.stats.slot_last_hit_unix_s(s.slot))
    }

    fn filters(&self) -> impl Iterator<Item = (String, &Arc<Filter>)> {
        std::iter::once(("flow".to_string(), &self.flow_filter))
            .chain(self.classes.iter().map(|(c, (f, _))| (class_name(c), f)))
    }

    /// Elements held in the filters' Bloom parts.
    pub fn bloom_items(&self) -> usize {
        self.filters().map(|(_, f)| f.bloom_len()).sum()
    }

    /// Moves up to `budget` Bloom-part elements of each filter back into
    /// cuckoo entries. Each element moves under its own two stripe locks,
    /// so a step never holds a stripe for long. Returns how many moved.
    pub fn migrate(&self, budget: usize) -> usize {
        self.filters().map(|(_, f)| f.migrate(budget)).sum()
    }

    /// Filter statistics, per filter and summed.
    pub fn filter_stats(&self) -> FilterStats {
        let mut out = FilterStats::default();
        let mut slots = 0usize;
        for (name, f) in self.filters() {
            let s = f.stats();
            out.items += s.items;
            out.bloom_items += s.bloom_items;
            out.memory_bytes += s.memory_bytes;
            slots += f.slots();
            out.estimated_fpr_sum += s.estimated_fpr;
            out.filters.insert(
                name,
                OneFilter {
                    items: s.items,
                    entries: s.entries,
                    bloom_items: s.bloom_items,
                    buckets: s.buckets,
                    fingerprint_bits: s.fingerprint_bits,
                    load_factor: s.load_factor,
                    estimated_fpr: s.estimated_fpr,
                    memory_bytes: s.memory_bytes,
                },
            );
        }
        out.occupancy = if slots == 0 {
            0.0
        } else {
            (out.items - out.bloom_items) as f64 / slots as f64
        };
        out
    }

    /// Where the counters of every `count` rule are, by id: what the
    /// control thread publishes so that statistics can be read without it.
    /// Changes whenever [`Self::count_rule_slots`] would answer otherwise
    /// (unique across stores: a cache keyed by it never mistakes one
    /// store's list for another's).
    pub fn count_rules_version(&self) -> u64 {
        self.count_rules.version()
    }

    pub fn count_rule_slots(&self) -> Vec<CountSlot> {
        self.count_rules
            .iter()
            .map(|(id, slot)| CountSlot {
                id,
                slot,
                baseline: self.slots.baseline(slot),
            })
            .collect()
    }
}

pub(super) fn domain_name(d: &Domain) -> String {
    match d {
        Domain::Flow => "flow".into(),
        Domain::Class(c) => class_name(c),
        Domain::Acl => "multi-field".into(),
    }
}

/// A readable name for a prefix class: `dst/24 v4 proto 6 port 80`.
pub fn class_name(c: &PrefixClass) -> String {
    let mut s = format!(
        "{}/{} {}",
        if c.dir == cfdp_rules::Dir::Src {
            "src"
        } else {
            "dst"
        },
        c.len,
        if c.v6 { "v6" } else { "v4" }
    );
    if let Some(p) = c.proto {
        s += &format!(" proto {p}");
    }
    if let Some(p) = c.port {
        s += &format!(" port {p}");
    }
    s
}
