//! The committed rules, stored compactly.
//!
//! Every rule owns a dense counter slot, so the rules live in an array
//! indexed by slot (no per-entry overhead, no hash-table slack) and an
//! id → slot index finds them by id: slots in a hash table hashed by their
//! rule's id (4 bytes an entry, not 8: the id is the rule's own, in the
//! slot array). The rule with a given *match* is found
//! in verify and exact mode through the published tables, which already map
//! every match to its rule (`Tables::rule_slot_of`); filter-only mode keeps
//! no such table, so the rule set indexes matches itself — slots in a hash
//! table hashed by their rule's match (4 bytes an entry: the match is the
//! rule's own, in the slot array).

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use cfdp_rules::{Match, Rule, RuleId};
use hashbrown::{DefaultHashBuilder, HashTable};

use super::types::Stored;

#[derive(Default)]
pub(super) struct RuleSet {
    /// Every taken slot, by its rule's id.
    by_id: IdIndex,
    /// Rule by slot. Only slots marked in `taken` hold a committed rule (a
    /// freed slot keeps its last rule until it is reused), so a bulk
    /// load's parsed rule list becomes this array as it is: no second
    /// copy of every rule while loading (480 MB at ten million rules).
    by_slot: Vec<Rule>,
    /// One bit per slot of `by_slot`.
    taken: Vec<u64>,
    /// Filter-only mode: every taken slot, by its rule's match.
    by_match: Option<MatchIndex>,
    /// Slots in id order, for pages of the rule set: built by the first
    /// page asked for (a store that is never paged never pays its ~16
    /// bytes a rule), then kept with every change.
    ordered: Option<BTreeMap<RuleId, u32>>,
}

/// Slots by their rule's id (see the module docs).
#[derive(Default)]
pub(super) struct IdIndex {
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl IdIndex {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self {
            table: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// The slot among `rules` whose rule has id `id`.
    pub(super) fn find(&self, rules: &[Rule], id: RuleId) -> Option<u32> {
        self.table
            .find(self.hasher.hash_one(id), |&s| rules[s as usize].id == id)
            .copied()
    }

    /// Adds `slot` (whose rule's id no other indexed slot's rule has).
    pub(super) fn add(&mut self, rules: &[Rule], slot: u32) {
        let hasher = &self.hasher;
        let h = hasher.hash_one(rules[slot as usize].id);
        self.table
            .insert_unique(h, slot, |&s| hasher.hash_one(rules[s as usize].id));
    }

    fn remove(&mut self, rules: &[Rule], slot: u32) {
        let h = self.hasher.hash_one(rules[slot as usize].id);
        if let Ok(e) = self.table.find_entry(h, |&s| s == slot) {
            e.remove();
        }
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn bytes(&self) -> usize {
        slot_table_bytes(&self.table)
    }
}

/// Heap bytes of a hash table of slots (hashbrown: a control byte and an
/// entry per bucket, plus a group of trailing control bytes).
fn slot_table_bytes(t: &HashTable<u32>) -> usize {
    match t.capacity() {
        0 => 0,
        c if c < 8 => (c + 1).next_power_of_two() * 5 + 16,
        c => (c * 8 / 7).next_power_of_two() * 5 + 16,
    }
}

/// Slots by their rule's match (see the module docs).
#[derive(Default)]
pub(super) struct MatchIndex {
    table: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl MatchIndex {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self {
            table: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn hash(&self, m: &Match) -> u64 {
        self.hasher.hash_one(m)
    }

    /// The slot among `rules` whose rule has match `m`.
    pub(super) fn find(&self, rules: &[Rule], m: &Match) -> Option<u32> {
        self.table
            .find(self.hash(m), |&s| rules[s as usize].matcher == *m)
            .copied()
    }

    /// Adds `slot` (whose rule in `rules` no other indexed slot's match
    /// equals).
    pub(super) fn add(&mut self, rules: &[Rule], slot: u32) {
        let h = self.hash(&rules[slot as usize].matcher);
        let hasher = &self.hasher;
        self.table
            .insert_unique(h, slot, |&s| hasher.hash_one(rules[s as usize].matcher));
    }

    fn remove(&mut self, rules: &[Rule], slot: u32) {
        let h = self.hash(&rules[slot as usize].matcher);
        if let Ok(e) = self.table.find_entry(h, |&s| s == slot) {
            e.remove();
        }
    }

    fn bytes(&self) -> usize {
        slot_table_bytes(&self.table)
    }
}

impl RuleSet {
    /// An empty set that indexes matches (filter-only mode).
    pub(super) fn with_match_index() -> Self {
        Self {
            by_match: Some(MatchIndex::default()),
            ..Self::default()
        }
    }

    /// The rules of a bulk load, rule `i` at slot `i`, with their id index
    /// (which must hold every slot) and, in filter-only mode, their match
    /// index.
    pub(super) fn from_parts(
        by_id: IdIndex,
        by_slot: Vec<Rule>,
        by_match: Option<MatchIndex>,
    ) -> Self {
        debug_assert_eq!(by_id.len(), by_slot.len());
        let n = by_slot.len();
        let mut taken = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            taken[n / 64] = (1u64 << (n % 64)) - 1;
        }
        Self {
            by_id,
            by_slot,
            taken,
            by_match,
            ordered: None,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn is_taken(&self, slot: u32) -> bool {
        let s = slot as usize;
        self.taken
            .get(s / 64)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    pub(super) fn get(&self, id: RuleId) -> Option<Stored> {
        let slot = self.by_id.find(&self.by_slot, id)?;
        let rule = self.at(slot)?;
        Some(Stored { rule, slot })
    }

    /// Whether this set indexes matches (filter-only mode).
    pub(super) fn indexes_matches(&self) -> bool {
        self.by_match.is_some()
    }

    /// The rule with match `m` (only when [`Self::indexes_matches`]).
    pub(super) fn by_match(&self, m: &Match) -> Option<Stored> {
        let slot = self.by_match.as_ref()?.find(&self.by_slot, m)?;
        let rule = self.at(slot)?;
        Some(Stored { rule, slot })
    }

    /// The rule at `slot`.
    pub(super) fn at(&self, slot: u32) -> Option<Rule> {
        self.is_taken(slot).then(|| self.by_slot[slot as usize])
    }

    /// Adds or replaces rule `s.rule.id` (at `s.slot`).
    pub(super) fn insert(&mut self, s: Stored) {
        // The same id at another slot: that slot is emptied.
        if let Some(old) = self.by_id.find(&self.by_slot, s.rule.id) {
            if old != s.slot {
                self.clear_slot(old);
            }
        }
        let i = s.slot as usize;
        if self.by_slot.len() <= i {
            // New slots in between hold a copy of this rule, not taken.
            self.by_slot.resize(i + 1, s.rule);
            self.taken.resize(self.by_slot.len().div_ceil(64), 0);
        }
        // The rule the slot held (this rule before a modify, or another
        // rule whose removal would come later) leaves the indexes before
        // its entry is overwritten: they find it by it.
        if self.is_taken(s.slot) {
            self.clear_slot(s.slot);
        }
        self.by_slot[i] = s.rule;
        self.taken[i / 64] |= 1 << (i % 64);
        self.by_id.add(&self.by_slot, s.slot);
        if let Some(idx) = &mut self.by_match {
            idx.add(&self.by_slot, s.slot);
        }
        if let Some(o) = &mut self.ordered {
            o.insert(s.rule.id, s.slot);
        }
    }

    pub(super) fn remove(&mut self, id: RuleId) {
        if let Some(slot) = self.by_id.find(&self.by_slot, id) {
            self.clear_slot(slot);
        }
    }

    /// Empties a taken `slot`: its rule leaves the indexes.
    fn clear_slot(&mut self, slot: u32) {
        if let Some(o) = &mut self.ordered {
            o.remove(&self.by_slot[slot as usize].id);
        }
        self.by_id.remove(&self.by_slot, slot);
        if let Some(idx) = &mut self.by_match {
            idx.remove(&self.by_slot, slot);
        }
        let s = slot as usize;
        self.taken[s / 64] &= !(1 << (s % 64));
    }

    /// Every rule with its slot, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Stored> + '_ {
        (0..self.by_slot.len() as u32)
            .filter_map(|slot| self.at(slot).map(|rule| Stored { rule, slot }))
    }

    /// Up to `limit` rules in id order: those after id `after`, or from
    /// the `offset`-th on. Costs O(log N + limit) with `after`, O(offset +
    /// limit) without (no copy or sort of the set either way), and the
    /// first call builds the id order once.
    pub(super) fn page(&mut self, after: Option<RuleId>, offset: usize, limit: usize) -> Vec<Rule> {
        if self.ordered.is_none() {
            let order = self.iter().map(|s| (s.rule.id, s.slot)).collect();
            self.ordered = Some(order);
        }
        let ordered = self.ordered.as_ref().expect("built above");
        let slots: Vec<u32> = match after {
            Some(id) => ordered
                .range((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
                .take(limit)
                .map(|(_, &slot)| slot)
                .collect(),
            None => ordered.values().skip(offset).take(limit).copied().collect(),
        };
        slots
            .into_iter()
            .map(|s| self.by_slot[s as usize])
            .collect()
    }

    /// Heap bytes: the id index, the slot array and its bits, the match
    /// index, the id order (estimated: a B-tree node holds up to 11
    /// entries of 8 bytes and, inside the tree, 12 child pointers).
    pub(super) fn memory_bytes(&self) -> usize {
        self.by_id.bytes()
            + self.by_slot.capacity() * std::mem::size_of::<Rule>()
            + self.taken.capacity() * 8
            + self.by_match.as_ref().map_or(0, MatchIndex::bytes)
            + self.ordered.as_ref().map_or(0, |o| o.len() * 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::{Action, Dir, IpPrefix, Match};

    fn rule(id: RuleId, len: u8) -> Rule {
        Rule {
            id,
            matcher: Match::Prefix(
                cfdp_rules::PrefixMatch::new(
                    Dir::Dst,
                    IpPrefix::new(false, [0; 16], len).unwrap(),
                    None,
                    None,
                )
                .unwrap(),
            ),
            action: Action::Drop,
        }
    }

    #[test]
    fn ids_and_slots_stay_consistent() {
        let mut s = RuleSet::default();
        s.insert(Stored {
            rule: rule(7, 8),
            slot: 3,
        });
        s.insert(Stored {
            rule: rule(9, 16),
            slot: 0,
        });
        assert_eq!(s.get(7).map(|x| (x.slot, x.rule)), Some((3, rule(7, 8))));
        // A modify keeps the slot and replaces the rule.
        s.insert(Stored {
            rule: rule(7, 24),
            slot: 3,
        });
        assert_eq!(s.get(7).map(|x| x.rule), Some(rule(7, 24)));
        // Slot 3 written with another rule while 7 still held it: 7 leaves
        // the indexes, and a later removal of 7 must not clear the newcomer.
        s.insert(Stored {
            rule: rule(11, 4),
            slot: 3,
        });
        s.remove(7);
        assert_eq!(s.get(11).map(|x| x.slot), Some(3));
        assert_eq!(s.get(7), None);
        assert_eq!(s.len(), 2);
        let ids: Vec<RuleId> = s.iter().map(|x| x.rule.id).collect();
        assert_eq!(ids, [9, 11]);
        assert_eq!(s.at(1), None, "a slot between two rules is not taken");
    }

    #[test]
    fn a_bulk_load_takes_exactly_its_slots() {
        for n in [1u32, 63, 64, 65, 130] {
            let rules: Vec<Rule> = (0..n).map(|i| rule(i + 100, 8)).collect();
            let mut index = IdIndex::with_capacity(n as usize);
            for i in 0..n {
                index.add(&rules, i);
            }
            let mut s = RuleSet::from_parts(index, rules, None);
            assert_eq!(s.iter().count(), n as usize);
            assert_eq!(s.at(n - 1).map(|r| r.id), Some(n + 99));
            assert_eq!(s.at(n), None);
            s.remove(100);
            assert_eq!((s.at(0), s.get(100), s.len()), (None, None, n as usize - 1));
        }
    }

    /// Filter-only mode's match index follows inserts, modifies that change
    /// a match, and removals.
    #[test]
    fn the_match_index_follows_the_rules() {
        let mut s = RuleSet::with_match_index();
        for (id, len, slot) in [(1, 8, 0), (2, 16, 1), (3, 24, 2)] {
            s.insert(Stored {
                rule: rule(id, len),
                slot,
            });
        }
        let m = |len| rule(0, len).matcher;
        assert_eq!(s.by_match(&m(16)).map(|x| x.rule.id), Some(2));
        // Rule 2 modified to another match: the old match is free.
        s.insert(Stored {
            rule: rule(2, 20),
            slot: 1,
        });
        assert_eq!(s.by_match(&m(16)), None);
        assert_eq!(s.by_match(&m(20)).map(|x| x.slot), Some(1));
        s.remove(3);
        assert_eq!(s.by_match(&m(24)), None);
        assert_eq!((s.len(), s.get(3)), (2, None));
        assert_eq!(s.by_match(&m(8)).map(|x| x.rule.id), Some(1));
    }
}
