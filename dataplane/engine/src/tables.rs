//! The published rule tables: what the workers read.
//!
//! Workers look rules up in [`Tables`]: one filter for the exact flow rules,
//! one filter per prefix class in use (in priority order), the exact tables
//! that confirm filter positives, and a slot array (filter value → rule, for
//! filter-only mode). The control thread is the single writer.
//!
//! In filter-only mode a filter entry's value is its rule's slot, and the
//! slot array gives the action: the exact tables hold only the keys the
//! control thread placed in a filter's Bloom part (whose answers carry no
//! value), and keys a batch gave to a new rule while their deleted rule's
//! filter entry (pointing at a dead slot) is still in the filter, key →
//! slot. That is where filter-only saves memory: no exact table of every
//! rule, in either copy.
//!
//! # How updates reach the workers
//!
//! `Tables` lives in a [`left_right`] pair: two copies, workers read one,
//! the control thread changes the other through an operation log ([`Op`])
//! and publishes with one pointer swap. A worker enters the tables once per
//! burst, so every packet of a burst sees one generation, and a batch
//! published with one swap is seen whole or not at all (`dataplane_atomic`).
//! Reads are wait-free: no lock, no retry, two counter writes per burst.
//!
//! The filters themselves are concurrent objects shared by both copies
//! (`Arc<Filter>`), changed in place by the control thread. They are kept a
//! **superset** of the keys of every copy a worker may be reading:
//!
//! * a key is inserted into its filter *before* the batch that adds it is
//!   published;
//! * a key is removed from its filter only *after* the batch that deletes it
//!   is published and every worker has left the copy that still held it
//!   (the rule store publishes twice: see `cfdp_control::store::publish`).
//!
//! In verify mode a filter positive is confirmed in the copy's own exact
//! table, so the answer is exactly the copy's rule set: stale filter entries
//! cost a table probe, never a wrong action, and no key of the copy is ever
//! missing from the filter (filters have no false negatives).
//!
//! The exact tables are [`SharedMap`]s: a bulk-loaded base both copies
//! share, and each copy's own changes since (see [`crate::shared`]).

use std::sync::Arc;

use cfdp_filter::Filter;
use cfdp_rules::{AclRule, Action, FlowKey, HashSecret, PrefixClass, RuleId};

use crate::acl::AclClassifier;
use hashbrown::HashMap;
use left_right::Absorb;

use crate::shared::{merge, Changes, SharedMap, SharedView};

/// An installed rule as a worker sees it: what a match resolves to. The
/// rule's id is not here (8 bytes instead of 12, in both copies of a
/// multi-gigabyte table): the rule store knows the rule by its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleRef {
    pub action: Action,
    /// Dense index of the rule: its filter value (filter-only mode) and its
    /// per-rule counters.
    pub slot: u32,
}

/// A rule in the slot array (filter-only mode): its action, and a check
/// of its key to verify a sample of the filter's answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRule {
    pub action: Action,
    /// [`key_check`] of the rule's filter hash.
    pub check: u32,
}

/// 32 bits of a key's 64-bit filter hash, mixed so that keys whose
/// fingerprints and buckets collide (a filter false positive) still differ
/// here unless their whole hashes do: filter-only mode verifies a sample
/// of its answers with it instead of keeping every rule's key (a 2^-32
/// chance of missing a false positive).
#[inline]
pub fn key_check(hash: u64) -> u32 {
    // The finaliser of SplitMix64 (Steele, Lea, Flood 2014).
    let mut z = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 32) as u32
}

/// One prefix class: its filter and exact table.
#[derive(Clone)]
pub(crate) struct ClassTables {
    pub(crate) class: PrefixClass,
    pub(crate) filter: Arc<Filter>,
    pub(crate) entries: SharedMap<[u8; 16], RuleRef>,
}

/// One copy of the published rule tables.
///
/// Invariants (kept by the constructors and [`Op`]s, the only ways in):
/// every rule's key is in its domain's filter and in the exact table
/// behind it; `classes` are in priority order; in filter-only mode
/// `slots[s]` holds rule `s`'s action and key check and `live_slots`
/// counts the occupied ones.
#[derive(Clone)]
pub struct Tables {
    pub(crate) flow_filter: Arc<Filter>,
    pub(crate) exact: SharedMap<FlowKey, RuleRef>,
    /// In priority order (longest prefix first; see `cfdp_rules::class`).
    pub(crate) classes: Vec<ClassTables>,
    /// Rule by slot: filter-only mode reads its actions from here (the
    /// filter's value is the slot). Empty in the other modes, which never
    /// read it.
    pub(crate) slots: Vec<Option<SlotRule>>,
    /// Slots holding a rule (filter-only mode).
    pub(crate) live_slots: usize,
    keep_slots: bool,
    /// Rule-set generation this copy shows.
    generation: u64,
    /// The multi-field rules (with explicit priorities), each tagged with
    /// its counter slot. They rank below every rule of the other forms,
    /// which is looked up first.
    pub(crate) acl: AclClassifier,
    /// The secrets every filter key of these tables is hashed with.
    pub(crate) secret: HashSecret,
}

/// A prefix class's part of a bulk-built [`Tables`]: its filter (holding
/// every key of `entries`) and its exact table.
pub struct ClassPart {
    pub class: PrefixClass,
    pub filter: Arc<Filter>,
    pub entries: HashMap<[u8; 16], RuleRef>,
}

impl Tables {
    /// Empty tables. `keep_slots`: maintain the slot array (filter-only
    /// mode; see `Tables::slots`).
    pub fn new(flow_filter: Arc<Filter>, keep_slots: bool) -> Self {
        Self {
            flow_filter,
            exact: SharedMap::default(),
            classes: Vec::new(),
            slots: Vec::new(),
            live_slots: 0,
            keep_slots,
            generation: 0,
            acl: AclClassifier::new(),
            secret: HashSecret::PUBLIC,
        }
    }

    /// These tables with their filter keys hashed under `secret` (see
    /// [`HashSecret`]): set before any rule is added, and the same secret
    /// the rule store hashes with.
    #[must_use]
    pub fn with_hash_secret(mut self, secret: HashSecret) -> Self {
        self.secret = secret;
        self
    }

    /// The secrets the filter keys are hashed with.
    pub fn hash_secret(&self) -> &HashSecret {
        &self.secret
    }

    /// Tables holding a whole rule set at once (the bulk load): the flow
    /// filter and exact table, the prefix classes (any order), and in
    /// filter-only mode the slot array (`None`: another mode). Each filter
    /// must hold every key of its exact table.
    pub fn from_parts(
        flow_filter: Arc<Filter>,
        exact: HashMap<FlowKey, RuleRef>,
        classes: Vec<ClassPart>,
        slots: Option<Vec<Option<SlotRule>>>,
        acl: AclClassifier,
    ) -> Self {
        let mut classes: Vec<ClassTables> = classes
            .into_iter()
            .map(|c| ClassTables {
                class: c.class,
                filter: c.filter,
                // The bases both left-right copies share: the second copy
                // costs no clone of the tables (see `shared`).
                entries: SharedMap::from_base(c.entries),
            })
            .collect();
        classes.sort_by_key(|x| (x.class.rank(), x.class));
        let keep_slots = slots.is_some();
        let slots = slots.unwrap_or_default();
        Self {
            flow_filter,
            exact: SharedMap::from_base(exact),
            classes,
            live_slots: slots.iter().filter(|s| s.is_some()).count(),
            slots,
            keep_slots,
            generation: 0,
            acl,
            secret: HashSecret::PUBLIC,
        }
    }

    /// Rule-set generation this copy shows.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The flow rules' filter (read-only: changes go through [`Op`]s).
    pub fn flow_filter(&self) -> &Filter {
        &self.flow_filter
    }

    /// Prefix classes holding rules in this copy.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// The slot of the rule with exactly this match in this copy.
    pub fn rule_slot_of(&self, m: &cfdp_rules::Match) -> Option<u32> {
        match (m, PrefixClass::of(m)) {
            (cfdp_rules::Match::Flow(k), _) => self.exact.get(k).map(|e| e.slot),
            (cfdp_rules::Match::Acl { m, priority }, _) => {
                self.acl.by_match(m, *priority).map(|(_, slot)| slot)
            }
            (_, Some((class, addr))) => self
                .classes
                .iter()
                .find(|c| c.class == class)
                .and_then(|c| c.entries.get(&addr))
                .map(|e| e.slot),
            (_, None) => None,
        }
    }

    /// Heap bytes of the exact tables' bases, which both copies share
    /// (count them once).
    pub fn shared_memory_bytes(&self) -> usize {
        self.exact.shared_bytes()
            + self
                .classes
                .iter()
                .map(|c| c.entries.shared_bytes())
                .sum::<usize>()
    }

    /// Heap bytes this copy holds alone: the exact tables' changes since
    /// their bases, the slot array (filters excluded: they are shared by
    /// both copies and accounted once by their owner).
    pub fn own_memory_bytes(&self) -> usize {
        self.exact.own_bytes()
            + self
                .classes
                .iter()
                .map(|c| c.entries.own_bytes() + std::mem::size_of::<ClassTables>())
                .sum::<usize>()
            + self.slots.capacity() * std::mem::size_of::<Option<SlotRule>>()
            + self.acl.bytes()
    }

    /// Whether an exact table needs a fold before `incoming` more changes
    /// (see [`SharedMap::needs_fold`]): time for an [`Op::Freeze`].
    pub fn needs_fold(&self, incoming: usize) -> bool {
        self.exact.needs_fold(incoming)
            || self.classes.iter().any(|c| c.entries.needs_fold(incoming))
    }

    /// Number of rules in this copy.
    pub fn len(&self) -> usize {
        if self.keep_slots {
            return self.live_slots + self.acl.len();
        }
        self.exact.len()
            + self.classes.iter().map(|c| c.entries.len()).sum::<usize>()
            + self.acl.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rule for a packet by the documented priority
    /// (`cfdp_rules::class`), from the exact tables alone (no filters): the
    /// one classifier — the reference the filters are checked against, the
    /// `exact` mode of the matcher, and what tests compare with.
    pub fn classify(&self, k: &FlowKey) -> Option<RuleRef> {
        self.classify_in(self.exact.view(), k)
    }

    /// [`Tables::classify`] with the exact flow table's view taken once
    /// for a burst.
    #[inline]
    pub fn classify_in(
        &self,
        exact: SharedView<'_, FlowKey, RuleRef>,
        k: &FlowKey,
    ) -> Option<RuleRef> {
        if let Some(&e) = exact.get(k) {
            return Some(e);
        }
        self.classes
            .iter()
            .filter(|c| c.class.admits(k))
            .find_map(|c| c.entries.get(&c.class.masked(k)).copied())
            .or_else(|| self.classify_acl(k))
    }

    /// The winning multi-field rule for `k`, if any.
    #[inline]
    pub fn classify_acl(&self, k: &FlowKey) -> Option<RuleRef> {
        let (action, slot) = self.acl.classify_action(k)?;
        Some(RuleRef { action, slot })
    }

    /// [`Self::classify_acl`] for each key of a burst.
    #[inline]
    pub fn classify_acl_burst(&self, keys: &[FlowKey], out: &mut [Option<RuleRef>]) {
        self.acl
            .classify_burst_into(keys, out, |action, slot| RuleRef { action, slot });
    }

    /// The multi-field rules a compile of this copy takes, into `out`
    /// (see [`AclClassifier::compile_input_into`]).
    pub fn acl_compile_input(&self, out: &mut Vec<crate::acl::compiled::Input>) {
        self.acl.compile_input_into(out);
    }

    /// The multi-field classifier's layers in this copy.
    pub fn acl_layers(&self) -> crate::acl::Layers {
        self.acl.layers()
    }

    /// Whether this copy holds multi-field rules.
    pub fn has_acl(&self) -> bool {
        !self.acl.is_empty()
    }

    fn class_mut(&mut self, class: &PrefixClass) -> Option<&mut ClassTables> {
        self.classes.iter_mut().find(|c| c.class == *class)
    }

    fn set_slot(&mut self, slot: u32, e: Option<SlotRule>) {
        if !self.keep_slots {
            return;
        }
        let s = slot as usize;
        if self.slots.len() <= s {
            self.slots.resize(s + 1, None);
        }
        match (self.slots[s].is_some(), e.is_some()) {
            (false, true) => self.live_slots += 1,
            (true, false) => self.live_slots -= 1,
            _ => {}
        }
        self.slots[s] = e;
    }
}

/// One change to the tables. Deterministic: applied once to each copy.
#[derive(Clone)]
pub enum Op {
    /// Adds or replaces an exact flow rule (in filter-only mode: a key the
    /// flow filter holds in its Bloom part).
    InsertFlow(FlowKey, RuleRef),
    RemoveFlow(FlowKey),
    /// Adds or replaces a prefix rule (the class must exist).
    InsertPrefix(PrefixClass, [u8; 16], RuleRef),
    RemovePrefix(PrefixClass, [u8; 16]),
    /// Adds an (empty) prefix class at its place in the priority order.
    AddClass(PrefixClass, Arc<Filter>),
    /// Removes an empty prefix class.
    RemoveClass(PrefixClass),
    /// Swaps in a rebuilt (grown) filter.
    SetFlowFilter(Arc<Filter>),
    SetClassFilter(PrefixClass, Arc<Filter>),
    SetGeneration(u64),
    /// Sets or clears a slot of the slot array (filter-only mode).
    SetSlot(u32, Option<SlotRule>),
    /// Starts a fold of every exact table that needs one before the given
    /// number of changes ([`Tables::needs_fold`]): its changes become a frozen layer both copies share (see
    /// [`crate::shared`]). The first copy to absorb it records the frozen
    /// layers here and the second copy takes them (both copies are in the
    /// same state at this point of the log).
    Freeze(usize, Option<Frozen>),
    /// Ends a fold: new bases (merged off the control thread from a
    /// [`FoldJob`]) replace base and frozen layer.
    Rebase(Arc<Folded>),
    /// Adds a multi-field rule at its counter slot, or replaces the rule
    /// with its id.
    InsertAcl(AclRule, u32),
    RemoveAcl(RuleId),
    /// Installs a compiled layer built off the control thread from an
    /// earlier copy's [`Tables::acl_compile_input`]: rules changed since
    /// are dead in it, rules it does not hold stay live (see
    /// [`AclClassifier::install`]), so both copies answer exactly.
    InstallAcl(Arc<crate::acl::compiled::Compiled>),
}

type FlowChanges = Arc<Changes<FlowKey, RuleRef>>;
type ClassChanges = Arc<Changes<[u8; 16], RuleRef>>;
type FlowBase = Arc<HashMap<FlowKey, RuleRef>>;
type ClassBase = Arc<HashMap<[u8; 16], RuleRef>>;

/// The frozen layers of a fold started by [`Op::Freeze`].
#[derive(Clone, Default)]
pub struct Frozen {
    exact: Option<FlowChanges>,
    classes: Vec<(PrefixClass, ClassChanges)>,
}

/// A fold in progress: each table's base and frozen layer, to merge.
pub struct FoldJob {
    exact: Option<(FlowBase, FlowChanges)>,
    classes: Vec<(PrefixClass, ClassBase, ClassChanges)>,
}

/// A finished fold: each frozen layer with the new base that replaces it
/// and the base below it.
pub struct Folded {
    exact: Option<(FlowChanges, FlowBase)>,
    classes: Vec<(PrefixClass, ClassChanges, ClassBase)>,
}

impl FoldJob {
    /// Merges every table's base and frozen layer (O(entries): run it off
    /// the control thread).
    pub fn run(self) -> Folded {
        Folded {
            exact: self
                .exact
                .map(|(b, f)| (Arc::clone(&f), Arc::new(merge(&b, &f)))),
            classes: self
                .classes
                .into_iter()
                .map(|(c, b, f)| (c, Arc::clone(&f), Arc::new(merge(&b, &f))))
                .collect(),
        }
    }
}

impl Tables {
    /// Whether a fold is in progress (an [`Op::Freeze`] without its
    /// [`Op::Rebase`] yet).
    pub fn folding(&self) -> bool {
        self.fold_job().is_some()
    }

    /// What a fold in progress has to merge (`None`: no fold).
    pub fn fold_job(&self) -> Option<FoldJob> {
        let job = FoldJob {
            exact: self.exact.fold_input(),
            classes: self
                .classes
                .iter()
                .filter_map(|c| c.entries.fold_input().map(|(b, f)| (c.class, b, f)))
                .collect(),
        };
        (job.exact.is_some() || !job.classes.is_empty()).then_some(job)
    }

    fn freeze(&mut self, incoming: usize) -> Frozen {
        let mut f = Frozen::default();
        if self.exact.needs_fold(incoming) {
            f.exact = Some(self.exact.freeze());
        }
        for c in &mut self.classes {
            if c.entries.needs_fold(incoming) {
                f.classes.push((c.class, c.entries.freeze()));
            }
        }
        f
    }

    fn adopt(&mut self, f: &Frozen) {
        if let Some(x) = &f.exact {
            self.exact.adopt(x);
        }
        for (class, x) in &f.classes {
            if let Some(c) = self.class_mut(class) {
                c.entries.adopt(x);
            }
        }
    }

    fn rebase(&mut self, f: &Folded) {
        if let Some((frozen, base)) = &f.exact {
            self.exact.rebase(frozen, base);
        }
        for (class, frozen, base) in &f.classes {
            // A class removed (and perhaps added anew) since the fold
            // started has another frozen layer or none: left alone.
            if let Some(c) = self.class_mut(class) {
                c.entries.rebase(frozen, base);
            }
        }
    }
}

impl Absorb<Op> for Tables {
    fn absorb_first(&mut self, op: &mut Op, _: &Self) {
        match op {
            Op::InsertFlow(k, e) => {
                self.exact.insert(*k, *e);
            }
            Op::RemoveFlow(k) => {
                self.exact.remove(k);
            }
            Op::InsertPrefix(c, a, e) => {
                let Some(ct) = self.class_mut(c) else {
                    debug_assert!(false, "insert into a missing class");
                    return;
                };
                ct.entries.insert(*a, *e);
            }
            Op::RemovePrefix(c, a) => {
                if let Some(ct) = self.class_mut(c) {
                    ct.entries.remove(a);
                }
            }
            Op::SetSlot(slot, e) => self.set_slot(*slot, *e),
            Op::AddClass(c, f) => {
                if self.class_mut(c).is_none() {
                    let at = self
                        .classes
                        .partition_point(|x| (x.class.rank(), x.class) < (c.rank(), *c));
                    self.classes.insert(
                        at,
                        ClassTables {
                            class: *c,
                            filter: Arc::clone(f),
                            entries: SharedMap::default(),
                        },
                    );
                }
            }
            Op::RemoveClass(c) => self
                .classes
                .retain(|x| x.class != *c || !x.entries.is_empty()),
            Op::SetFlowFilter(f) => self.flow_filter = Arc::clone(f),
            Op::SetClassFilter(c, f) => {
                if let Some(ct) = self.class_mut(c) {
                    ct.filter = Arc::clone(f);
                }
            }
            Op::SetGeneration(g) => self.generation = *g,
            Op::Freeze(incoming, done) => match done {
                Some(f) => self.adopt(f),
                None => *done = Some(self.freeze(*incoming)),
            },
            Op::Rebase(f) => self.rebase(f),
            Op::InsertAcl(r, slot) => {
                let _ = self.acl.remove(r.id);
                let added = self.acl.insert_tagged(*r, *slot);
                debug_assert!(added.is_ok(), "the store validated it");
            }
            Op::RemoveAcl(id) => {
                let _ = self.acl.remove(*id);
            }
            Op::InstallAcl(c) => self.acl.install(Arc::clone(c)),
        }
    }

    fn sync_with(&mut self, first: &Self) {
        *self = first.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::Dir;

    fn class(len: u8) -> PrefixClass {
        PrefixClass {
            v6: false,
            dir: Dir::Dst,
            len,
            proto: None,
            port: None,
        }
    }

    fn filter() -> Arc<Filter> {
        Arc::new(Filter::new(cfdp_filter::Config::cuckoo(64, 12)).unwrap())
    }

    #[test]
    fn classes_stay_in_priority_order_and_slots_count_their_rules() {
        let mut t = Tables::new(filter(), true);
        let e = |slot| RuleRef {
            action: Action::Drop,
            slot,
        };
        let sr = |check| SlotRule {
            action: Action::Drop,
            check,
        };
        for len in [8, 24, 16] {
            t.absorb_first(
                &mut Op::AddClass(class(len), filter()),
                &Tables::new(filter(), true),
            );
        }
        let lens: Vec<u8> = t.classes.iter().map(|c| c.class.len).collect();
        assert_eq!(lens, [24, 16, 8]);
        let other = Tables::new(filter(), true);
        t.absorb_first(&mut Op::InsertPrefix(class(16), [10; 16], e(3)), &other);
        t.absorb_first(&mut Op::SetSlot(3, Some(sr(7))), &other);
        assert_eq!((t.slots[3], t.len()), (Some(sr(7)), 1));
        // Setting a live slot again replaces it; clearing counts down.
        t.absorb_first(&mut Op::SetSlot(3, Some(sr(8))), &other);
        t.absorb_first(&mut Op::SetSlot(5, Some(sr(9))), &other);
        assert_eq!((t.slots[3], t.live_slots), (Some(sr(8)), 2));
        t.absorb_first(&mut Op::SetSlot(3, None), &other);
        t.absorb_first(&mut Op::SetSlot(3, None), &other);
        assert_eq!((t.slots[3], t.live_slots), (None, 1));
        t.absorb_first(&mut Op::RemoveClass(class(16)), &other);
        assert_eq!(t.classes.len(), 3, "a class with entries is kept");
        t.absorb_first(&mut Op::RemovePrefix(class(16), [10; 16]), &other);
        t.absorb_first(&mut Op::RemoveClass(class(16)), &other);
        assert_eq!(t.classes.len(), 2);
        // Outside filter-only mode there is no slot array.
        let mut v = Tables::new(filter(), false);
        v.absorb_first(&mut Op::SetSlot(1, Some(sr(1))), &other);
        assert!(v.slots.is_empty());
    }

    #[test]
    fn key_checks_differ_where_hashes_differ_in_any_bits() {
        let base = 0x1234_5678_9abc_def0u64;
        let c = key_check(base);
        for bit in 0..64 {
            assert_ne!(key_check(base ^ (1 << bit)), c, "bit {bit}");
        }
    }
}
