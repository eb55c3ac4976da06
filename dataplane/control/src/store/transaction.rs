//! A batch in progress: the overlay over the committed state, validation
//! of each update against it, execution on the filters (queuing table
//! operations), and undo.

use std::time::Instant;

use cfdp_engine::{key_check, SlotRule};
use cfdp_filter::{InsertError, Placement};
use cfdp_rules::decide::{self, Refusal};
use cfdp_rules::UpdateError;

use std::sync::Arc;

use cfdp_engine::{Mode, Op, RuleRef};
use cfdp_filter::Filter;
use cfdp_rules::{
    AclRule, Atomicity, Batch, Code, Match, PrefixClass, Rule, RuleId, Update, UpdateResult,
};
use hashbrown::HashMap;

use super::state::RuleStore;
use super::types::{
    class_of, domain_and_hash, prefix_addr, ApplyError, BatchReport, Domain, InsertReport, Stored,
    Timing,
};
use super::views::domain_name;
use crate::journal::JournalError;

/// A batch in progress: an overlay over the committed state.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) ids: HashMap<RuleId, Option<Stored>>,
    pub(super) matches: HashMap<Match, Option<RuleId>>,
    pub(super) ops: Vec<Op>,
    /// Filter inserts done (undone if the batch aborts).
    pub(super) inserted: Vec<(Arc<Filter>, u64, u32)>,
    /// Filter removals to do once no worker reads the old copy.
    pub(super) removals: Vec<(Arc<Filter>, u64, u32)>,
    pub(super) new_slots: Vec<u32>,
    pub(super) freed_slots: Vec<u32>,
    /// Filters created or rebuilt in this batch.
    pub(super) flow_filter: Option<Arc<Filter>>,
    pub(super) class_filters: HashMap<PrefixClass, Arc<Filter>>,
    /// Change of each class's entry count.
    pub(super) class_delta: HashMap<PrefixClass, isize>,
    pub(super) effective: Vec<Update>,
    pub(super) report: InsertReport,
    pub(super) iterations_sum: u64,
    /// Slots a dry run would hand out.
    pub(super) dry_slots: usize,
    pub(super) timing: Timing,
    /// Filter-only mode: slots whose filter entry an insert of this batch
    /// evicted into a Bloom part (their keys must go into the exact
    /// tables: Bloom answers carry no slot).
    pub(super) evicted: Vec<u32>,
    /// The rule each slot handed out in this batch went to.
    pub(super) slot_ids: HashMap<u32, RuleId>,
}

impl RuleStore {
    /// Applies a batch. `durable(updates, generation)` is called with the
    /// updates that took effect and the new generation before anything is
    /// published; if it fails, the batch is undone and refused.
    pub fn apply(
        &mut self,
        batch: &Batch,
        durable: impl FnOnce(&[Update], u64) -> Result<(), JournalError>,
    ) -> Result<BatchReport, ApplyError> {
        let start = Instant::now();
        // The previous batch's deleted keys leave the filters first (and
        // its slots become reusable).
        self.settle();
        if let Some(expected) = batch.expected_generation {
            if expected != self.generation {
                return Err(ApplyError::GenerationMismatch {
                    expected,
                    current: self.generation,
                });
            }
        }
        if batch.atomicity == Atomicity::DataplaneAtomic && self.cfg.mode == Mode::FilterOnly {
            return Err(ApplyError::Refused(
                "dataplane_atomic needs verify or exact mode: in filter-only mode \
                 packets read actions from the filter, which changes key by key"
                    .into(),
            ));
        }
        let n = batch.updates.len();
        let mut results: Vec<UpdateResult> = Vec::with_capacity(n);
        let mut p = Pending::default();
        // Sized for the batch up front: growing these maps update by
        // update rehashed them ~10 times in a 1024-update batch.
        p.ids.reserve(n);
        p.matches.reserve(n);
        p.ops.reserve(n + 2);
        p.effective.reserve(n);
        let hints = class_hints(batch);
        let mut mark = Instant::now();
        let mut lap = |t: &mut u64| {
            let now = Instant::now();
            *t += now.duration_since(mark).as_micros() as u64;
            mark = now;
        };
        if batch.atomicity.all_or_nothing() {
            // Executed straight away and undone at the first failure. Only
            // a failing batch is then validated as a whole, touching
            // nothing, so its answer names every bad update (what a
            // validation pass ahead of execution gave, for every batch:
            // 0.26–0.5 ms of a 1024-insert batch's ~2 ms).
            for (i, u) in batch.updates.iter().enumerate() {
                let r = parsed(u).and_then(|u| self.step(&mut p, u, &hints));
                if let Err(e) = r {
                    self.undo(&mut p);
                    lap(&mut p.timing.filter_us);
                    results = self.validate(batch);
                    lap(&mut p.timing.validate_us);
                    if results.iter().all(|r| r.code == Code::Ok) {
                        // Valid, but it failed executing (e.g. a full
                        // filter): that update is the answer.
                        results[i] = e;
                        decide::abort_others(&mut results, Some(i));
                    } else {
                        decide::abort_others(&mut results, None);
                    }
                    return Ok(self.report(false, batch.atomicity, start, results, p));
                }
                results.push(UpdateResult::ok());
            }
        } else {
            for u in &batch.updates {
                let r = parsed(u).and_then(|u| self.step(&mut p, u, &hints));
                results.push(r.err().unwrap_or_else(UpdateResult::ok));
            }
        }
        lap(&mut p.timing.filter_us);
        if p.effective.is_empty() {
            return Ok(self.report(false, batch.atomicity, start, results, p));
        }
        let generation = self.generation + 1;
        if let Err(e) = durable(&p.effective, generation) {
            self.undo(&mut p);
            return Err(ApplyError::NotDurable(e));
        }
        lap(&mut p.timing.journal_us);
        self.commit(&mut p, generation);
        lap(&mut p.timing.publish_us);
        Ok(self.report(true, batch.atomicity, start, results, p))
    }

    fn report(
        &self,
        applied: bool,
        atomicity: Atomicity,
        start: Instant,
        results: Vec<UpdateResult>,
        mut p: Pending,
    ) -> BatchReport {
        let mut filter = std::mem::take(&mut p.report);
        if filter.inserts > 0 {
            filter.mean_iterations = p.iterations_sum as f64 / filter.inserts as f64;
        }
        BatchReport {
            applied,
            atomicity,
            generation: self.generation,
            wall_us: start.elapsed().as_micros() as u64,
            results,
            filter,
            timing: p.timing,
        }
    }

    fn get_id(&self, p: &Pending, id: RuleId) -> Option<Stored> {
        match p.ids.get(&id) {
            Some(s) => *s,
            None => self.rules.get(id),
        }
    }

    fn get_match(&self, p: &Pending, m: &Match) -> Option<RuleId> {
        match p.matches.get(m) {
            Some(id) => *id,
            None => self.rule_with_match(m).map(|r| r.id),
        }
    }

    fn current_filter(&self, p: &Pending, d: &Domain) -> Option<Arc<Filter>> {
        match d {
            Domain::Flow => Some(p.flow_filter.as_ref().unwrap_or(&self.flow_filter).clone()),
            Domain::Class(c) => p
                .class_filters
                .get(c)
                .or_else(|| self.classes.get(c).map(|(f, _)| f))
                .cloned(),
            Domain::Acl => None,
        }
    }

    pub(super) fn value_for(&self, slot: u32) -> u32 {
        if self.cfg.mode == Mode::FilterOnly {
            slot
        } else {
            0
        }
    }

    /// A slot for new rule `id` of the batch (given back by `undo`).
    fn alloc_slot(&mut self, p: &mut Pending, id: RuleId) -> Option<u32> {
        let slot = self.slots.take()?;
        if !self.stats.ensure_slot(slot, id) {
            self.slots.untake(slot);
            return None;
        }
        p.new_slots.push(slot);
        Some(slot)
    }

    fn no_slot(&self) -> UpdateResult {
        UpdateResult::err(
            Code::CapacityExhausted,
            format!("max_rules = {} rules installed", self.cfg.max_rules),
        )
    }

    fn place(
        &mut self,
        p: &mut Pending,
        rule: &Rule,
        slot: u32,
        hints: &ClassHints,
    ) -> Result<Placement, UpdateResult> {
        let (domain, h) = domain_and_hash(&self.cfg.hash_secret, &rule.matcher);
        if let Domain::Acl = domain {
            // No filter: the classifier's tables take it (with the op).
            return Ok(Placement::Entry);
        }
        let value = self.value_for(slot);
        let mut filter = match self.current_filter(p, &domain) {
            Some(f) => f,
            None => {
                let Domain::Class(c) = domain else {
                    unreachable!("flow filter always exists")
                };
                let cap = self
                    .cfg
                    .prefix_capacity
                    .max(hints.get(&c).copied().unwrap_or(0) * 9 / 8);
                let f = self
                    .cfg
                    .new_filter(cap)
                    .map_err(|e| UpdateResult::err(Code::InvalidArgument, e.to_string()))?;
                p.class_filters.insert(c, Arc::clone(&f));
                p.ops.push(Op::AddClass(c, Arc::clone(&f)));
                f
            }
        };
        let outcome = loop {
            match filter.insert_hash(h, value) {
                Ok(o) => break o,
                Err(InsertError::Full { .. }) if self.cfg.auto_grow => {
                    filter = self.grow(p, &domain, &filter)?;
                }
                Err(e) => {
                    return Err(UpdateResult::err(
                        Code::CapacityExhausted,
                        format!(
                            "{} filter: {e} ({} items; enable auto_grow or raise its capacity)",
                            domain_name(&domain),
                            filter.len()
                        ),
                    ))
                }
            }
        };
        let r = &mut p.report;
        r.inserts += 1;
        match outcome.placement {
            Placement::Entry => r.cuckoo += 1,
            Placement::Bloom => r.bloom += 1,
        }
        r.bloom_added += u64::from(outcome.bloom_added);
        r.max_iterations = r.max_iterations.max(outcome.iterations);
        p.iterations_sum += u64::from(outcome.iterations);
        p.inserted.push((filter, h, value));
        if let (Some(v), Mode::FilterOnly) = (outcome.evicted, self.cfg.mode) {
            p.evicted.push(v);
        }
        Ok(outcome.placement)
    }

    /// Queues the table operations of a rule now at `slot`: `placed` says
    /// where its filter insert put the key (`None`: the match is unchanged
    /// and was not inserted again). In filter-only mode the slot array
    /// carries the rule, and only a key placed in a Bloom part (whose
    /// answers carry no slot) goes into the exact tables.
    fn queue_insert_op(&self, p: &mut Pending, rule: &Rule, slot: u32, placed: Option<Placement>) {
        let (domain, h) = domain_and_hash(&self.cfg.hash_secret, &rule.matcher);
        if let Domain::Acl = domain {
            Self::queue_table_entry(p, rule, slot);
            return;
        }
        let filter_only = self.cfg.mode == Mode::FilterOnly;
        if filter_only {
            p.ops.push(Op::SetSlot(
                slot,
                Some(SlotRule {
                    action: rule.action,
                    check: key_check(h),
                }),
            ));
        }
        // A match whose rule this batch deleted still has that rule's
        // filter entry until the commit settles, and a lookup may meet it
        // first: the new rule's key goes into the exact tables too, where
        // a lookup that lands on the deleted rule's slot looks next.
        let freed_here = p.matches.get(&rule.matcher) == Some(&None);
        if !filter_only || placed == Some(Placement::Bloom) || (placed.is_some() && freed_here) {
            Self::queue_table_entry(p, rule, slot);
        }
        if let Domain::Class(c) = domain {
            *p.class_delta.entry(c).or_default() += 1;
        }
    }

    /// Queues the exact-table entry of `rule` at `slot`.
    fn queue_table_entry(p: &mut Pending, rule: &Rule, slot: u32) {
        let e = RuleRef {
            action: rule.action,
            slot,
        };
        match rule.matcher {
            Match::Flow(k) => p.ops.push(Op::InsertFlow(*k.key(), e)),
            Match::Acl { .. } => {
                let r = AclRule::of(rule).expect("a multi-field rule");
                p.ops.push(Op::InsertAcl(r, slot));
            }
            m => {
                let (c, addr) = PrefixClass::of(&m).expect("a prefix match has a class");
                p.ops.push(Op::InsertPrefix(c, addr, e));
            }
        }
    }

    /// Filter-only mode: queues the exact-table entries of the rules whose
    /// filter entries this batch's inserts evicted into a Bloom part, as
    /// the batch leaves those rules (one deleted since has none; one
    /// modified since gets its new key, which costs nothing if the new key
    /// sits in an entry).
    pub(super) fn queue_evicted(&self, p: &mut Pending) {
        for v in std::mem::take(&mut p.evicted) {
            let id = self
                .rules
                .at(v)
                .map(|r| r.id)
                .or_else(|| p.slot_ids.get(&v).copied());
            let rule = match id.map(|id| p.ids.get(&id)) {
                Some(Some(Some(s))) if s.slot == v => Some(s.rule),
                Some(Some(_)) | None => None,
                Some(None) => self.rules.at(v),
            };
            if let Some(r) = rule {
                Self::queue_table_entry(p, &r, v);
            }
        }
    }

    fn queue_remove(&self, p: &mut Pending, s: &Stored) {
        let (d, h) = domain_and_hash(&self.cfg.hash_secret, &s.rule.matcher);
        if let Domain::Acl = d {
            p.ops.push(Op::RemoveAcl(s.rule.id));
            return;
        }
        if self.cfg.mode == Mode::FilterOnly {
            p.ops.push(Op::SetSlot(s.slot, None));
        }
        match &d {
            Domain::Flow => {
                let Match::Flow(k) = s.rule.matcher else {
                    unreachable!()
                };
                p.ops.push(Op::RemoveFlow(*k.key()));
            }
            Domain::Class(c) => {
                p.ops
                    .push(Op::RemovePrefix(*c, prefix_addr(&s.rule.matcher)));
                *p.class_delta.entry(*c).or_default() -= 1;
            }
            Domain::Acl => unreachable!("returned above"),
        }
        if let Some(f) = self.current_filter(p, &d) {
            p.removals.push((f, h, self.value_for(s.slot)));
        }
    }

    /// One update, carried out: checked against the overlay, applied to
    /// the filters, queued as table operations, and recorded in the
    /// overlay. On an error nothing of this update is left (`undo` takes
    /// back the batch's earlier ones).
    fn step(
        &mut self,
        p: &mut Pending,
        u: &Update,
        hints: &ClassHints,
    ) -> Result<(), UpdateResult> {
        decide::check(&Overlay { store: self, p }, u).map_err(Refusal::result)?;
        match u {
            Update::Insert(r) => {
                let slot = self.alloc_slot(p, r.id).ok_or_else(|| self.no_slot())?;
                p.slot_ids.insert(slot, r.id);
                let placed = match self.place(p, r, slot, hints) {
                    Ok(placed) => placed,
                    Err(e) => {
                        p.new_slots.retain(|&s| s != slot);
                        self.slots.untake(slot);
                        return Err(e);
                    }
                };
                self.queue_insert_op(p, r, slot, Some(placed));
                record_insert(p, r, slot);
            }
            Update::Delete(id) => {
                let s = self.get_id(p, *id).expect("checked: the rule exists");
                self.queue_remove(p, &s);
                p.freed_slots.push(s.slot);
                record_delete(p, &s);
            }
            Update::Modify(r) => {
                let old = self.get_id(p, r.id).expect("checked: the rule exists");
                if old.rule.matcher == r.matcher {
                    self.queue_insert_op(p, r, old.slot, None);
                    if let Some(c) = class_of(&r.matcher) {
                        // An overwrite, not a new entry.
                        *p.class_delta.entry(c).or_default() -= 1;
                    }
                } else {
                    let placed = self.place(p, r, old.slot, hints)?;
                    self.queue_remove(p, &old);
                    self.queue_insert_op(p, r, old.slot, Some(placed));
                }
                record_modify(p, r, &old);
            }
        }
        p.effective.push(*u);
        Ok(())
    }

    /// One update, checked only: what [`Self::step`] would answer, short
    /// of the filters' capacity, touching nothing but the dry overlay `p`
    /// (an insert takes a place among the free slots, not a slot).
    fn dry_step(&self, p: &mut Pending, u: &Update) -> Result<(), UpdateResult> {
        decide::check(&Overlay { store: self, p }, u).map_err(Refusal::result)?;
        match u {
            Update::Insert(r) => {
                if p.dry_slots >= self.slots.available() {
                    return Err(self.no_slot());
                }
                p.dry_slots += 1;
                record_insert(p, r, u32::MAX);
            }
            Update::Delete(id) => {
                let s = self.get_id(p, *id).expect("checked: the rule exists");
                record_delete(p, &s);
            }
            Update::Modify(r) => {
                let old = self.get_id(p, r.id).expect("checked: the rule exists");
                record_modify(p, r, &old);
            }
        }
        Ok(())
    }

    /// Every update checked against the store and the batch's earlier
    /// updates, touching nothing: each one's result.
    fn validate(&self, batch: &Batch) -> Vec<UpdateResult> {
        let mut dry = Pending::default();
        batch
            .updates
            .iter()
            .map(|u| {
                parsed(u)
                    .and_then(|u| self.dry_step(&mut dry, u))
                    .err()
                    .unwrap_or_else(UpdateResult::ok)
            })
            .collect()
    }

    /// Undoes a batch's filter inserts and slot allocations.
    fn undo(&mut self, p: &mut Pending) {
        for (f, h, v) in p.inserted.drain(..).rev() {
            f.remove_hash(h, v);
        }
        for s in p.new_slots.drain(..) {
            self.slots.untake(s);
        }
        // Entries the undone inserts evicted into a Bloom part stay there
        // (removing the inserts does not move them back): committed rules
        // among them get their exact-table entries now, or their Bloom
        // answers would find no rule.
        let moved: Vec<Op> = std::mem::take(&mut p.evicted)
            .into_iter()
            .filter_map(|v| self.rules.at(v).map(|r| (r, v)))
            .map(|(r, v)| {
                let mut q = Pending::default();
                Self::queue_table_entry(&mut q, &r, v);
                q.ops.pop().expect("one entry queued")
            })
            .collect();
        if !moved.is_empty() {
            for op in moved {
                self.w.append(op);
            }
            self.w.publish();
        }
    }
}

pub(super) type ClassHints = HashMap<PrefixClass, usize>;

/// How many keys each prefix class gets from a batch (to size new filters).
/// An update as the batch holds it: one that did not parse is
/// `invalid_argument`.
fn parsed(u: &Result<Update, UpdateError>) -> Result<&Update, UpdateResult> {
    u.as_ref()
        .map_err(|e| UpdateResult::err(Code::InvalidArgument, e.to_string()))
}

/// The overlay after inserting `r` at `slot`.
fn record_insert(p: &mut Pending, r: &Rule, slot: u32) {
    p.ids.insert(r.id, Some(Stored { rule: *r, slot }));
    p.matches.insert(r.matcher, Some(r.id));
}

/// The overlay after deleting `s`.
fn record_delete(p: &mut Pending, s: &Stored) {
    p.ids.insert(s.rule.id, None);
    p.matches.insert(s.rule.matcher, None);
}

/// The overlay after `old` became `r` (same id and slot).
fn record_modify(p: &mut Pending, r: &Rule, old: &Stored) {
    p.ids.insert(
        r.id,
        Some(Stored {
            rule: *r,
            slot: old.slot,
        }),
    );
    if old.rule.matcher != r.matcher {
        p.matches.insert(old.rule.matcher, None);
    }
    p.matches.insert(r.matcher, Some(r.id));
}

fn class_hints(batch: &Batch) -> ClassHints {
    let mut h = ClassHints::new();
    for u in batch.updates.iter().flatten() {
        if let Update::Insert(r) | Update::Modify(r) = u {
            if let Some(c) = class_of(&r.matcher) {
                *h.entry(c).or_default() += 1;
            }
        }
    }
    h
}

/// The store with a batch's pending updates laid over it, as
/// [`decide::check`] reads a rule set.
struct Overlay<'a> {
    store: &'a RuleStore,
    p: &'a Pending,
}

impl decide::RuleView for Overlay<'_> {
    fn rule(&self, id: RuleId) -> Option<Rule> {
        self.store.get_id(self.p, id).map(|s| s.rule)
    }

    fn match_owner(&self, r: &Rule) -> Option<RuleId> {
        self.store.get_match(self.p, &r.matcher)
    }
}
