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
    by_slot: Vec<Option<Rule>>,
}

impl RuleSet {
    pub(super) fn with_capacity(n: usize) -> Self {
        Self {
            slot_of: HashMap::with_capacity(n),
            by_slot: Vec::with_capacity(n),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    pub(super) fn contains(&self, id: RuleId) -> bool {
        self.slot_of.contains_key(&id)
    }

    pub(super) fn get(&self, id: RuleId) -> Option<Stored> {
        let slot = *self.slot_of.get(&id)?;
        let rule = self.by_slot.get(slot as usize).copied().flatten()?;
        Some(Stored { rule, slot })
    }

    /// The rule at `slot`.
    pub(super) fn at(&self, slot: u32) -> Option<Rule> {
        self.by_slot.get(slot as usize).copied().flatten()
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
            self.by_slot.resize(i + 1, None);
        }
        self.by_slot[i] = Some(s.rule);
    }

    pub(super) fn remove(&mut self, id: RuleId) {
        if let Some(slot) = self.slot_of.remove(&id) {
            self.clear_slot(slot, id);
        }
    }

    /// Empties `slot` if it still holds rule `id` (within one batch another
    /// rule may already have been written there).
    fn clear_slot(&mut self, slot: u32, id: RuleId) {
        if let Some(r) = self.by_slot.get_mut(slot as usize) {
            if r.is_some_and(|r| r.id == id) {
                *r = None;
            }
        }
    }

    /// Every rule with its slot, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Stored> + '_ {
        self.by_slot.iter().enumerate().filter_map(|(slot, r)| {
            r.map(|rule| Stored {
                rule,
                slot: slot as u32,
            })
        })
    }

    /// Heap bytes: the id index and the slot array.
    pub(super) fn memory_bytes(&self) -> usize {
        table_bytes(&self.slot_of) + self.by_slot.capacity() * std::mem::size_of::<Option<Rule>>()
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
    }
}
