//! Commit: how a batch reaches the workers, and why no worker ever sees a
//! rule missing from its filter.
//!
//! # The safety argument
//!
//! Workers read one of two copies of [`Tables`] (a `left_right` pair) and
//! probe the filters, which both copies share and which the store changes
//! in place. The invariant: **every key of a copy a worker may be reading
//! is in its filter** (filters have no false negatives, so a lookup of a
//! rule of that copy never misses). The commit keeps it:
//!
//! 1. New keys went into their filters during execution, before anything
//!    is published: the filters are a superset of the new copy.
//! 2. The journal (durability hook) has run before this point: a published
//!    batch is a durable batch.
//! 3. `publish()` swaps the copies: new bursts see the new generation whole
//!    (one swap per batch, `dataplane_atomic`).
//! 4. A second `publish()` returns only once no worker still reads the
//!    copy from before the swap (left-right waits for every reader that
//!    entered it to leave: at most one burst).
//! 5. Only then are deleted keys removed from the filters and their slots
//!    recycled: no copy that still holds them can be entered any more.
//!
//! Steps 4 and 5 are [`RuleStore::settle`]: they change nothing a worker
//! or a controller can observe (the batch is durable and published after
//! step 3; a stale filter entry only costs a table probe), so the control
//! thread runs them after it has answered, and `apply` runs them first if
//! they are still due. The response does not wait for the workers' bursts.
//!
//! In verify mode a stale filter entry (a key deleted from the tables but
//! not yet from the filter) costs a table probe, never a wrong action.

use std::sync::Arc;

use cfdp_engine::Op;
use cfdp_rules::PrefixClass;

use super::state::RuleStore;
use super::transaction::Pending;

impl RuleStore {
    pub(super) fn commit(&mut self, p: &mut Pending, generation: u64) {
        for &slot in &p.new_slots {
            // A slot's counters start at zero; only a recycled slot has
            // totals from an earlier rule to subtract, and a last hit to
            // forget.
            if self.slots.start(slot, self.stats.slot_totals(slot)) {
                self.stats.clear_slot_last_hit(slot);
            }
        }
        // A fold that finished merging, and a finished recompile of the
        // multi-field rules, land with this batch.
        self.land_fold(false);
        self.land_compile(false);
        self.queue_evicted(p);
        // Changes that outgrew their base, or that this batch could make
        // double, start a fold before the batch's operations (decided on
        // the published copy, which holds what the copy being written will
        // hold when it reaches the freeze: both replay the same log).
        let incoming = p.ops.len();
        let freeze = self.fold.is_none() && self.w.enter().is_some_and(|t| t.needs_fold(incoming));
        if freeze {
            self.w.append(Op::Freeze(incoming, None));
        }
        for op in p.ops.drain(..) {
            self.w.append(op);
        }
        self.w.append(Op::SetGeneration(generation));
        self.w.publish();
        self.generation = generation;
        if freeze {
            self.start_fold();
        }
        self.maybe_start_compile();
        for (id, s) in p.ids.drain() {
            match s {
                Some(s) => {
                    if s.rule.action == cfdp_rules::Action::Count {
                        self.count_rules.set(id, s.slot);
                        if self.slots.is_recycled(s.slot) {
                            // A recycled slot's baseline is new.
                            self.count_rules.touch();
                        }
                    } else {
                        self.count_rules.unset(id);
                    }
                    self.rules.insert(s);
                }
                None => {
                    self.count_rules.unset(id);
                    self.rules.remove(id);
                }
            }
        }
        // `p.matches` needs no commit: the published tables index matches.
        p.matches.clear();
        if let Some(f) = p.flow_filter.take() {
            self.flow_filter = f;
        }
        let mut touched: Vec<PrefixClass> = p.class_filters.keys().copied().collect();
        for (c, f) in p.class_filters.drain() {
            let e = self.classes.entry(c).or_insert_with(|| (Arc::clone(&f), 0));
            e.0 = f;
        }
        for (c, d) in p.class_delta.drain() {
            if let Some(e) = self.classes.get_mut(&c) {
                e.1 = (e.1 as isize + d).max(0) as usize;
            }
            touched.push(c);
        }
        // Classes left empty (including ones created by this batch whose
        // inserts all failed) leave the tables.
        touched.sort_unstable();
        touched.dedup();
        let emptied: Vec<PrefixClass> = touched
            .into_iter()
            .filter(|c| self.classes.get(c).is_some_and(|e| e.1 == 0))
            .collect();
        // Steps 4 and 5 (`settle`) are due before the next batch — for
        // every batch, including an insert-only one that leaves nothing to
        // remove: settle's publish also brings the other copy up to date
        // with this batch's operations, which would otherwise be replayed
        // inside the next batch's publish, before its answer. The control
        // thread settles after answering.
        let due = self.unsettled.get_or_insert_with(Default::default);
        due.removals.append(&mut p.removals);
        due.freed_slots.append(&mut p.freed_slots);
        due.emptied.extend(emptied);
    }

    /// Steps 4 and 5 of the last commit, if still due: waits until no
    /// worker reads the copy from before it, then removes deleted keys from
    /// the filters, recycles their slots, and drops prefix classes the
    /// batch left empty. Cheap when nothing is due.
    pub fn settle(&mut self) {
        let Some(due) = self.unsettled.take() else {
            return;
        };
        self.w.publish();
        for (f, h, v) in due.removals {
            f.remove_hash(h, v);
        }
        for s in due.freed_slots {
            self.slots.release(s);
        }
        // A class may have been refilled since: only still-empty ones go.
        let mut removed = false;
        for c in due.emptied {
            if self.classes.get(&c).is_some_and(|e| e.1 == 0) {
                self.classes.remove(&c);
                self.w.append(Op::RemoveClass(c));
                removed = true;
            }
        }
        if removed {
            self.w.publish();
        }
    }
}

impl RuleStore {
    /// Starts merging the frozen layers of the published copy (the copy
    /// that absorbed the [`Op::Freeze`] first) on a thread of its own: a
    /// fold is O(entries), seconds at ten million rules, and the control
    /// thread keeps answering meanwhile. If no thread can be started the
    /// merge runs here.
    fn start_fold(&mut self) {
        let Some(job) = self.w.enter().and_then(|t| t.fold_job()) else {
            return;
        };
        self.folds.0 += 1;
        let spawned = std::thread::Builder::new()
            .name("cfdp-fold".into())
            .spawn(move || job.run());
        match spawned {
            Ok(h) => self.fold = Some(h),
            Err(e) => {
                eprintln!("cfdp: control: no thread for the tables' fold ({e}): merging here");
                if let Some(job) = self.w.enter().and_then(|t| t.fold_job()) {
                    self.w.append(Op::Rebase(Arc::new(job.run())));
                    self.folds.1 += 1;
                }
            }
        }
    }

    /// Appends the finished fold's [`Op::Rebase`] (waiting for the merge
    /// when `wait`); true when one was appended. The caller publishes.
    fn land_fold(&mut self, wait: bool) -> bool {
        if !self.fold.as_ref().is_some_and(|h| wait || h.is_finished()) {
            return false;
        }
        let h = self.fold.take().expect("checked above");
        match h.join() {
            Ok(folded) => {
                self.w.append(Op::Rebase(Arc::new(folded)));
                self.folds.1 += 1;
                true
            }
            Err(_) => {
                // The frozen layers stay (lookups stay right, one probe
                // more); the next commit starts the merge again.
                eprintln!("cfdp: control: the tables' fold failed: retrying");
                self.folds.0 -= 1;
                false
            }
        }
    }

    /// Lands a finished fold between batches (the control thread's idle
    /// loop; with `wait`, waits for the merge): both copies take the new
    /// bases, the old ones are freed. True when a fold landed.
    pub fn finish_fold(&mut self, wait: bool) -> bool {
        if !self.land_fold(wait) {
            // A merge that failed (or a store restored mid-fold) restarts.
            if self.fold.is_none() && self.w.enter().is_some_and(|t| t.folding()) {
                self.start_fold();
            }
            return false;
        }
        self.settle();
        // Two publishes: the second copy absorbs the rebase too.
        self.w.publish();
        self.w.publish();
        true
    }

    /// Folds of the exact tables (started, landed) since the store began.
    pub fn folds(&self) -> (u64, u64) {
        self.folds
    }
}
