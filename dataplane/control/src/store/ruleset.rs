//! The committed rules, stored compactly.
//!
//! Every rule owns a dense counter slot, so the rules live in an array
//! indexed by slot (no per-entry overhead, no hash-table slack) and a small
//! id → slot index finds them by id. The rule with a given *match* is not
//! indexed here: the published tables already map every match to its rule
//! (`Tables::rule_slot_of`), and a second index would cost ~45 bytes a rule.

use cfdp_engine::tables::table_bytes;
use cfdp_rules::{Rule, RuleId};
use hashbrown::HashMap;

use super::Stored;

#[derive(Default)]
pub(super) struct RuleSet {
    slot_of: HashMap<RuleId, u32>,
    /// Rule by slot. Only slots marked in `taken` hold a committed rule (a
    /// freed slot keeps its last rule until it is reused), so a bulk
    /// load's parsed rule list becomes this array as it is: no second
    /// copy of every rule while loading (480 MB at ten million rules).
    by_slot: Vec<Rule>,
    /// One bit per slot of `by_slot`.
    taken: Vec<u64>,
}

impl RuleSet {
    /// The rules of a bulk load, rule `i` at slot `i`, with their id index
    /// (which must map every rule's id to its position).
    pub(super) fn from_parts(slot_of: HashMap<RuleId, u32>, by_slot: Vec<Rule>) -> Self {
        debug_assert_eq!(slot_of.len(), by_slot.len());
        let n = by_slot.len();
        let mut taken = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            taken[n / 64] = (1u64 << (n % 64)) - 1;
        }
        Self {
            slot_of,
            by_slot,
            taken,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    fn is_taken(&self, slot: u32) -> bool {
        let s = slot as usize;
        self.taken
            .get(s / 64)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    pub(super) fn get(&self, id: RuleId) -> Option<Stored> {
        let slot = *self.slot_of.get(&id)?;
        let rule = self.at(slot)?;
        Some(Stored { rule, slot })
    }

    /// The rule at `slot`.
    pub(super) fn at(&self, slot: u32) -> Option<Rule> {
        self.is_taken(slot).then(|| self.by_slot[slot as usize])
    }

    /// Adds or replaces rule `s.rule.id` (at `s.slot`).
    pub(super) fn insert(&mut self, s: Stored) {
        if let Some(old) = self.slot_of.insert(s.rule.id, s.slot) {
            if old != s.slot {
                self.clear_slot(old, s.rule.id);
            }
        }
        let i = s.slot as usize;
        if self.by_slot.len() <= i {
            // New slots in between hold a copy of this rule, not taken.
            self.by_slot.resize(i + 1, s.rule);
            self.taken.resize(self.by_slot.len().div_ceil(64), 0);
        }
        self.by_slot[i] = s.rule;
        self.taken[i / 64] |= 1 << (i % 64);
    }

    pub(super) fn remove(&mut self, id: RuleId) {
        if let Some(slot) = self.slot_of.remove(&id) {
            self.clear_slot(slot, id);
        }
    }

    /// Empties `slot` if it still holds rule `id` (within one batch another
    /// rule may already have been written there).
    fn clear_slot(&mut self, slot: u32, id: RuleId) {
        if self.at(slot).is_some_and(|r| r.id == id) {
            let s = slot as usize;
            self.taken[s / 64] &= !(1 << (s % 64));
        }
    }

    /// Every rule with its slot, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Stored> + '_ {
        (0..self.by_slot.len() as u32)
            .filter_map(|slot| self.at(slot).map(|rule| Stored { rule, slot }))
    }

    /// Heap bytes: the id index, the slot array and its bits.
    pub(super) fn memory_bytes(&self) -> usize {
        table_bytes(&self.slot_of)
            + self.by_slot.capacity() * std::mem::size_of::<Rule>()
            + self.taken.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::{Action, Dir, IpPrefix, Match};

    fn rule(id: RuleId, len: u8) -> Rule {
        Rule {
            id,
            matcher: Match::Prefix {
                dir: Dir::Dst,
                prefix: IpPrefix {
                    v6: false,
                    addr: [0; 16],
                    len,
                },
                proto: None,
                port: None,
            },
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
        // Slot 3 reused by another rule before 7's removal is seen: the
        // removal must not clear the newcomer.
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
            let index = (0..n).map(|i| (i + 100, i)).collect();
            let mut s = RuleSet::from_parts(index, rules);
            assert_eq!(s.iter().count(), n as usize);
            assert_eq!(s.at(n - 1).map(|r| r.id), Some(n + 99));
            assert_eq!(s.at(n), None);
            s.remove(100);
            assert_eq!((s.at(0), s.get(100), s.len()), (None, None, n as usize - 1));
        }
    }
}
