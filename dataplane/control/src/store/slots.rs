//! Rule slots and the `count` rules' index: state with invariants of its
//! own, kept by these methods rather than by every stage that touches it.
//!
//! A slot is where a rule's counters live (and, in filter-only mode, the
//! value its filter entries carry). A slot freed by a delete is recycled
//! only after the delete settled (no worker reads the copy that still
//! maps to it); its counters keep their totals, so a recycled slot
//! remembers them as its new rule's baseline.

use std::collections::BTreeMap;

use cfdp_rules::RuleId;
use hashbrown::HashMap;

use super::types::fresh_version;

/// The slots of one store.
#[derive(Debug)]
pub(super) struct Slots {
    free: Vec<u32>,
    /// Slots below this were handed out at least once.
    next: u32,
    max: usize,
    /// Counter totals of a recycled slot when its current rule got it.
    baselines: HashMap<u32, (u64, u64)>,
}

impl Slots {
    /// Slots `0..used` taken (a bulk load), up to `max` in all.
    pub(super) fn new(max: usize, used: u32) -> Self {
        Self {
            free: Vec::new(),
            next: used,
            max,
            baselines: HashMap::new(),
        }
    }

    /// Slots [`Slots::take`] can still hand out.
    pub(super) fn available(&self) -> usize {
        self.free.len() + (self.max - self.next as usize)
    }

    /// A free slot: a recycled one first.
    pub(super) fn take(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if (self.next as usize) < self.max {
            self.next += 1;
            return Some(self.next - 1);
        }
        None
    }

    /// Gives back a slot taken for a batch that was undone (never
    /// published: its baseline, if any, is not yet set).
    pub(super) fn untake(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// A committed slot's counters start from `totals`: a recycled slot's
    /// baseline. Whether it had totals (then its last hit is stale too).
    pub(super) fn start(&mut self, slot: u32, totals: (u64, u64)) -> bool {
        if totals == (0, 0) {
            return false;
        }
        self.baselines.insert(slot, totals);
        true
    }

    /// A deleted rule's slot, once no worker reads it: free again.
    pub(super) fn release(&mut self, slot: u32) {
        self.baselines.remove(&slot);
        self.free.push(slot);
    }

    /// What `slot`'s counters held when its rule got it.
    pub(super) fn baseline(&self, slot: u32) -> (u64, u64) {
        self.baselines.get(&slot).copied().unwrap_or((0, 0))
    }

    pub(super) fn is_recycled(&self, slot: u32) -> bool {
        self.baselines.contains_key(&slot)
    }

    pub(super) fn memory_bytes(&self) -> usize {
        cfdp_engine::shared::table_bytes(&self.baselines) + self.free.capacity() * 4
    }
}

/// The `count` rules by id, and a version that changes whenever what
/// [`super::RuleStore::count_rule_slots`] answers does (unique across
/// stores: a cache keyed by it never mistakes one store's list for
/// another's).
#[derive(Debug)]
pub(super) struct CountRules {
    by_id: BTreeMap<RuleId, u32>,
    version: u64,
}

impl CountRules {
    pub(super) fn new(by_id: BTreeMap<RuleId, u32>) -> Self {
        Self {
            by_id,
            version: fresh_version(),
        }
    }

    /// `id` is a `count` rule at `slot`.
    pub(super) fn set(&mut self, id: RuleId, slot: u32) {
        if self.by_id.insert(id, slot) != Some(slot) {
            self.version = fresh_version();
        }
    }

    /// `id` is not (or no longer) a `count` rule.
    pub(super) fn unset(&mut self, id: RuleId) {
        if self.by_id.remove(&id).is_some() {
            self.version = fresh_version();
        }
    }

    /// A `count` rule's slot got a new baseline: the answer changed.
    pub(super) fn touch(&mut self) {
        self.version = fresh_version();
    }

    pub(super) fn version(&self) -> u64 {
        self.version
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (RuleId, u32)> + '_ {
        self.by_id.iter().map(|(&id, &slot)| (id, slot))
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.by_id.len() * 2 * std::mem::size_of::<(RuleId, u32)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_recycled_only_when_released_and_keep_their_baseline() {
        let mut s = Slots::new(2, 0);
        assert_eq!((s.take(), s.take(), s.take()), (Some(0), Some(1), None));
        s.untake(1);
        assert_eq!(s.available(), 1);
        assert_eq!(s.take(), Some(1));
        assert!(!s.start(1, (0, 0)), "a fresh slot has no baseline");
        s.release(0);
        let again = s.take().unwrap();
        assert_eq!(again, 0);
        assert!(s.start(0, (5, 500)));
        assert!(s.is_recycled(0));
        assert_eq!(s.baseline(0), (5, 500));
        s.release(0);
        assert_eq!(s.baseline(0), (0, 0), "a released slot forgets it");
    }

    #[test]
    fn the_count_version_moves_with_every_change_and_only_then() {
        let mut c = CountRules::new(BTreeMap::new());
        let v0 = c.version();
        c.unset(7);
        assert_eq!(c.version(), v0, "removing an absent id changes nothing");
        c.set(7, 3);
        let v1 = c.version();
        assert_ne!(v1, v0);
        c.set(7, 3);
        assert_eq!(c.version(), v1, "the same slot again changes nothing");
        c.set(7, 4);
        assert_ne!(c.version(), v1);
        let v2 = c.version();
        c.touch();
        assert_ne!(c.version(), v2);
        assert_eq!(c.iter().collect::<Vec<_>>(), [(7, 4)]);
    }
}
