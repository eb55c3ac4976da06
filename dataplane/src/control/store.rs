//! The rule store: the control thread's authoritative rule set, and the
//! only writer of the published [`Tables`].
//!
//! A batch goes through three stages:
//!
//! 1. **Validate** every update in order against the rule set as the
//!    earlier updates of the batch leave it (an overlay over the committed
//!    state). For `rollback_on_error` and `dataplane_atomic` a batch with
//!    any invalid update stops here: nothing was touched.
//! 2. **Execute**: new keys go into their filters through the filter's
//!    insert path (Bloom-assisted when configured), table changes are
//!    collected as [`Op`]s. A filter that cannot take a key is rebuilt at
//!    twice the size from the rule set when `auto_grow` is on (off the packet
//!    path: workers keep using the old one), else the update fails with
//!    `capacity_exhausted`; in the all-or-nothing modes every filter insert
//!    of the batch is then undone.
//! 3. **Commit**: the durability hook (the journal) runs first, then the
//!    operations are published with one swap, then the store waits until no
//!    worker still reads the previous copy (a second publish) and only then
//!    removes deleted keys from the filters and recycles their slots.
//!
//! Every batch is published with one swap whatever its atomicity mode, so
//! in verify and exact mode every packet sees the rule set from before or
//! after a whole batch. In filter-only mode the action comes from the
//! filter's value, which changes key by key: that mode refuses
//! `dataplane_atomic`.

use std::sync::Arc;
use std::time::Instant;

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, InsertError, Placement};
use cfdp_rules::{Atomicity, Batch, Code, Match, PrefixClass, Rule, RuleId, Update, UpdateResult};
use hashbrown::HashMap;
use left_right::{ReadHandleFactory, WriteHandle};
use serde::Serialize;
use serde_json::{json, Value};

use crate::matcher::{filter_params, Matcher, Mode};
use crate::stats::LiveStats;
use crate::tables::{Entry, Op, Tables};

/// Filter and rule-store parameters (`[filter]` and `[control]` in the
/// configuration).
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    pub mode: Mode,
    /// Items the flow-rule filter is sized for at first.
    pub flow_capacity: usize,
    /// Items each prefix-class filter is sized for at first.
    pub prefix_capacity: usize,
    /// `None`: plain cuckoo inserts. `Some`: the Bloom-Cuckoo insert path.
    pub bloom: Option<BloomMode>,
    /// Threshold `t` of the Bloom-Cuckoo path.
    pub threshold: u32,
    pub max_kicks: u32,
    /// Rebuild a full filter at twice the size instead of refusing inserts.
    pub auto_grow: bool,
    /// Most rules at once (slots; also the filter value width in
    /// filter-only mode).
    pub max_rules: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Verify,
            flow_capacity: 1 << 16,
            prefix_capacity: 1 << 12,
            bloom: Some(BloomMode::Bit),
            threshold: 0,
            max_kicks: 500,
            auto_grow: true,
            max_rules: 1 << 20,
        }
    }
}

impl StoreConfig {
    fn bloom_field_bits(&self) -> u32 {
        match self.bloom {
            None => 0,
            Some(BloomMode::Bit) => 1,
            Some(BloomMode::Tag { bits }) => bits,
        }
    }

    fn value_bits(&self) -> u32 {
        if self.mode == Mode::FilterOnly {
            usize::BITS - self.max_rules.saturating_sub(1).max(1).leading_zeros()
        } else {
            0
        }
    }

    /// The filter configuration for `capacity` items.
    pub fn filter_config(&self, capacity: usize) -> Result<Config, String> {
        let (fp, v) = filter_params(self.mode, self.value_bits(), self.bloom_field_bits())?;
        Ok(Config {
            capacity: capacity.max(16),
            fingerprint_bits: fp,
            value_bits: v,
            bloom: self.bloom.map(|mode| BloomConfig {
                mode,
                threshold: self.threshold,
            }),
            max_kicks: self.max_kicks,
            ..Config::default()
        })
    }

    fn new_filter(&self, capacity: usize) -> Result<Arc<Filter>, String> {
        let cfg = self.filter_config(capacity)?;
        Filter::new(cfg).map(Arc::new).map_err(|e| e.to_string())
    }
}

/// A committed rule.
#[derive(Clone, Copy, Debug)]
struct Stored {
    rule: Rule,
    slot: u32,
}

/// Why a batch was refused as a whole (no update was applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyError {
    GenerationMismatch {
        expected: u64,
        current: u64,
    },
    /// The durability hook failed: nothing was published.
    NotDurable(String),
    /// The batch cannot be honoured in this configuration.
    Refused(String),
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::GenerationMismatch { expected, current } => write!(
                f,
                "expected generation {expected}, but the rule set is at generation {current}"
            ),
            ApplyError::NotDurable(e) => write!(f, "batch not applied: journal: {e}"),
            ApplyError::Refused(e) => f.write_str(e),
        }
    }
}

/// How a batch's filter inserts went.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct InsertReport {
    /// Filter inserts performed (inserts, and modifies that change a match).
    pub inserts: u64,
    /// Landed in a cuckoo entry.
    pub cuckoo: u64,
    /// Landed in the Bloom part (the item itself).
    pub bloom: u64,
    /// Inserts that grew the Bloom part (the item or an entry it evicted).
    pub bloom_added: u64,
    pub max_iterations: u32,
    pub mean_iterations: f64,
    /// Filters rebuilt at twice the size during this batch.
    pub grown: Vec<String>,
}

/// The answer to a batch.
#[derive(Clone, Debug, Serialize)]
pub struct BatchReport {
    /// True when the batch changed the rule set.
    pub applied: bool,
    pub atomicity: Atomicity,
    /// Rule-set generation after the batch.
    pub generation: u64,
    pub wall_us: u64,
    pub results: Vec<UpdateResult>,
    pub filter: InsertReport,
}

impl BatchReport {
    /// Whether every update succeeded.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| r.code == Code::Ok)
    }
}

/// A batch in progress: an overlay over the committed state.
#[derive(Default)]
struct Pending {
    ids: HashMap<RuleId, Option<Stored>>,
    matches: HashMap<Match, Option<RuleId>>,
    ops: Vec<Op>,
    /// Filter inserts done (undone if the batch aborts).
    inserted: Vec<(Arc<Filter>, u64, u32)>,
    /// Filter removals to do once no worker reads the old copy.
    removals: Vec<(Arc<Filter>, u64, u32)>,
    new_slots: Vec<u32>,
    freed_slots: Vec<u32>,
    /// Filters created or rebuilt in this batch.
    flow_filter: Option<Arc<Filter>>,
    class_filters: HashMap<PrefixClass, Arc<Filter>>,
    /// Change of each class's entry count.
    class_delta: HashMap<PrefixClass, isize>,
    effective: Vec<Update>,
    report: InsertReport,
    iterations_sum: u64,
    /// Slots a dry run would hand out.
    dry_slots: usize,
}

/// Where a rule's key lives.
enum Domain {
    Flow,
    Class(PrefixClass),
}

fn domain_and_hash(m: &Match) -> (Domain, u64) {
    match (m, PrefixClass::of(m)) {
        (Match::Flow(k), _) => (Domain::Flow, k.hash()),
        (_, Some((class, addr))) => (Domain::Class(class), class.hash_masked(&addr)),
        (Match::Prefix { .. }, None) => unreachable!("a prefix match has a class"),
    }
}

fn prefix_addr(m: &Match) -> [u8; 16] {
    PrefixClass::of(m).expect("flow rules have no prefix").1
}

/// The authoritative rule set and the writer of the published tables.
pub struct RuleStore {
    cfg: StoreConfig,
    w: WriteHandle<Tables, Op>,
    factory: ReadHandleFactory<Tables>,
    stats: Arc<LiveStats>,
    rules: HashMap<RuleId, Stored>,
    by_match: HashMap<Match, RuleId>,
    flow_filter: Arc<Filter>,
    classes: HashMap<PrefixClass, (Arc<Filter>, usize)>,
    free_slots: Vec<u32>,
    next_slot: u32,
    /// Counter totals of a slot when its current rule got it.
    baselines: HashMap<u32, (u64, u64)>,
    generation: u64,
}

impl RuleStore {
    /// An empty store. `stats` must be the live statistics the workers
    /// write (their per-rule counters are allocated from here).
    pub fn new(cfg: StoreConfig, stats: Arc<LiveStats>) -> Result<Self, String> {
        if cfg.max_rules == 0 || cfg.max_rules > u32::MAX as usize {
            return Err(format!("max_rules = {}: must be 1..=2^32-1", cfg.max_rules));
        }
        let flow_filter = cfg.new_filter(cfg.flow_capacity)?;
        let (w, r) =
            left_right::new_from_empty::<Tables, Op>(Tables::new(Arc::clone(&flow_filter)));
        let factory = r.factory();
        Ok(Self {
            cfg,
            w,
            factory,
            stats,
            rules: HashMap::new(),
            by_match: HashMap::new(),
            flow_filter,
            classes: HashMap::new(),
            free_slots: Vec::new(),
            next_slot: 0,
            baselines: HashMap::new(),
            generation: 0,
        })
    }

    /// A store holding `rules` (validated as one all-or-nothing batch).
    pub fn with_rules(
        mut cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: &[Rule],
    ) -> Result<Self, String> {
        let flows = rules
            .iter()
            .filter(|r| matches!(r.matcher, Match::Flow(_)))
            .count();
        cfg.flow_capacity = cfg.flow_capacity.max(flows + flows / 8);
        cfg.max_rules = cfg.max_rules.max(rules.len());
        let mut store = Self::new(cfg, stats)?;
        if !rules.is_empty() {
            store.load(rules)?;
        }
        Ok(store)
    }

    /// Inserts `rules` as one rollback-on-error batch; the first failure is
    /// the error.
    pub fn load(&mut self, rules: &[Rule]) -> Result<(), String> {
        let batch = Batch {
            atomicity: Atomicity::RollbackOnError,
            expected_generation: None,
            updates: rules.iter().map(|r| Ok(Update::Insert(*r))).collect(),
        };
        let report = self
            .apply(&batch, |_, _| Ok(()))
            .map_err(|e| e.to_string())?;
        match report
            .results
            .iter()
            .enumerate()
            .find(|(_, r)| r.code != Code::Ok && r.code != Code::Aborted)
        {
            Some((i, r)) => Err(format!(
                "rule #{} (id {}): {}",
                i + 1,
                rules[i].id,
                r.message
            )),
            None => Ok(()),
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn matcher(&self) -> Matcher {
        Matcher::new(self.cfg.mode)
    }

    /// Workers get their read handles from here.
    pub fn readers(&self) -> ReadHandleFactory<Tables> {
        self.factory.clone()
    }

    pub fn live_stats(&self) -> &Arc<LiveStats> {
        &self.stats
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Sets the generation (when restoring persisted state).
    pub fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
        self.w.append(Op::SetGeneration(generation));
        self.w.publish();
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every rule, sorted by id.
    pub fn rules(&self) -> Vec<Rule> {
        let mut v: Vec<Rule> = self.iter().collect();
        v.sort_by_key(|r| r.id);
        v
    }

    /// Every rule, in no particular order (no copy of the whole set).
    pub fn iter(&self) -> impl Iterator<Item = Rule> + '_ {
        self.rules.values().map(|s| s.rule)
    }

    pub fn rule(&self, id: RuleId) -> Option<Rule> {
        self.rules.get(&id).map(|s| s.rule)
    }

    /// Packets and bytes that matched rule `id` since it was installed.
    pub fn rule_counters(&self, id: RuleId) -> Option<(u64, u64)> {
        let s = self.rules.get(&id)?;
        let (p, b) = self.stats.slot_totals(s.slot);
        let (bp, bb) = self.baselines.get(&s.slot).copied().unwrap_or((0, 0));
        Some((p.saturating_sub(bp), b.saturating_sub(bb)))
    }

    /// The JSON form of a rule with its counters.
    pub fn rule_json(&self, id: RuleId) -> Option<Value> {
        let r = self.rule(id)?;
        let (packets, bytes) = self.rule_counters(id).unwrap_or((0, 0));
        let mut v = cfdp_rules::rule_to_json(&r);
        v["packets"] = packets.into();
        v["bytes"] = bytes.into();
        Some(v)
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
    pub fn filter_stats(&self) -> Value {
        let mut per = serde_json::Map::new();
        let (mut items, mut bloom, mut mem, mut slots) = (0usize, 0usize, 0usize, 0usize);
        let mut fpr_sum = 0.0;
        for (name, f) in self.filters() {
            let s = f.stats();
            items += s.items;
            bloom += s.bloom_items;
            mem += s.memory_bytes;
            slots += f.slots();
            fpr_sum += s.estimated_fpr;
            per.insert(
                name,
                json!({
                    "items": s.items, "entries": s.entries, "bloom_items": s.bloom_items,
                    "buckets": s.buckets, "fingerprint_bits": s.fingerprint_bits,
                    "load_factor": s.load_factor, "estimated_fpr": s.estimated_fpr,
                    "memory_bytes": s.memory_bytes,
                }),
            );
        }
        json!({
            "items": items,
            "bloom_items": bloom,
            "occupancy": if slots == 0 { 0.0 } else { (items - bloom) as f64 / slots as f64 },
            "memory_bytes": mem,
            // A packet probes the flow filter and every admitting class
            // filter: the sum bounds its false-positive probability.
            "estimated_fpr_sum": fpr_sum,
            "filters": per,
        })
    }

    // ----- batches -------------------------------------------------------

    /// Applies a batch. `durable(updates, generation)` is called with the
    /// updates that took effect and the new generation before anything is
    /// published; if it fails, the batch is undone and refused.
    pub fn apply(
        &mut self,
        batch: &Batch,
        durable: impl FnOnce(&[Update], u64) -> Result<(), String>,
    ) -> Result<BatchReport, ApplyError> {
        let start = Instant::now();
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
        let hints = class_hints(batch);
        if batch.atomicity.all_or_nothing() {
            // Stage 1: validate everything; touch nothing.
            let mut dry = Pending::default();
            let mut failed = false;
            for u in &batch.updates {
                let r = match u {
                    Err(msg) => Err(UpdateResult::err(Code::InvalidArgument, msg.clone())),
                    Ok(u) => self.step(&mut dry, u, false, &hints),
                };
                failed |= r.is_err();
                results.push(r.err().unwrap_or_else(UpdateResult::ok));
            }
            if failed {
                abort_results(&mut results, None);
                return Ok(self.report(false, batch.atomicity, start, results, p));
            }
            // Stage 2: execute.
            results.clear();
            for (i, u) in batch.updates.iter().enumerate() {
                let u = u.as_ref().expect("validated");
                if let Err(e) = self.step(&mut p, u, true, &hints) {
                    self.undo(&mut p);
                    results = vec![UpdateResult::ok(); n];
                    results[i] = e;
                    abort_results(&mut results, Some(i));
                    return Ok(self.report(false, batch.atomicity, start, results, p));
                }
                results.push(UpdateResult::ok());
            }
        } else {
            for u in &batch.updates {
                let r = match u {
                    Err(msg) => Err(UpdateResult::err(Code::InvalidArgument, msg.clone())),
                    Ok(u) => self.step(&mut p, u, true, &hints),
                };
                results.push(r.err().unwrap_or_else(UpdateResult::ok));
            }
        }
        if p.effective.is_empty() {
            return Ok(self.report(false, batch.atomicity, start, results, p));
        }
        let generation = self.generation + 1;
        if let Err(e) = durable(&p.effective, generation) {
            self.undo(&mut p);
            return Err(ApplyError::NotDurable(e));
        }
        self.commit(&mut p, generation);
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
        }
    }

    fn get_id(&self, p: &Pending, id: RuleId) -> Option<Stored> {
        match p.ids.get(&id) {
            Some(s) => *s,
            None => self.rules.get(&id).copied(),
        }
    }

    fn get_match(&self, p: &Pending, m: &Match) -> Option<RuleId> {
        match p.matches.get(m) {
            Some(id) => *id,
            None => self.by_match.get(m).copied(),
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
        }
    }

    fn value_for(&self, slot: u32) -> u32 {
        if self.cfg.mode == Mode::FilterOnly {
            slot
        } else {
            0
        }
    }

    fn alloc_slot(&mut self, p: &mut Pending, execute: bool) -> Option<u32> {
        if !execute {
            let free = self.free_slots.len() + (self.cfg.max_rules - self.next_slot as usize);
            if p.dry_slots >= free {
                return None;
            }
            p.dry_slots += 1;
            return Some(u32::MAX);
        }
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None if (self.next_slot as usize) < self.cfg.max_rules => {
                self.next_slot += 1;
                self.next_slot - 1
            }
            None => return None,
        };
        if !self.stats.ensure_slot(slot) {
            self.free_slots.push(slot);
            return None;
        }
        p.new_slots.push(slot);
        Some(slot)
    }

    /// Puts a rule's key into its filter (creating or growing the filter as
    /// needed) and queues the table operation.
    fn place(
        &mut self,
        p: &mut Pending,
        rule: &Rule,
        slot: u32,
        hints: &ClassHints,
    ) -> Result<(), UpdateResult> {
        let (domain, h) = domain_and_hash(&rule.matcher);
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
                    .map_err(|e| UpdateResult::err(Code::InvalidArgument, e))?;
                p.class_filters.insert(c, Arc::clone(&f));
                p.ops.push(Op::AddClass(c, Arc::clone(&f)));
                f
            }
        };
        let outcome = loop {
            match filter.insert_hash(h, value) {
                Ok(o) => break o,
                Err(InsertError::Full { .. } | InsertError::Contended) if self.cfg.auto_grow => {
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
        Ok(())
    }

    /// Rebuilds `old` at twice its size from the rule set as the batch
    /// leaves it so far, and queues the swap.
    fn grow(
        &mut self,
        p: &mut Pending,
        d: &Domain,
        old: &Arc<Filter>,
    ) -> Result<Arc<Filter>, UpdateResult> {
        let keys: Vec<(u64, u32)> = self.domain_keys(p, d);
        let mut log2 = old.buckets().trailing_zeros() + 1;
        loop {
            if log2 > 30 {
                return Err(UpdateResult::err(
                    Code::CapacityExhausted,
                    format!("{} filter cannot grow beyond 2^30 buckets", domain_name(d)),
                ));
            }
            let mut cfg = old.config().clone();
            cfg.buckets_log2 = Some(log2);
            let f = Arc::new(
                Filter::new(cfg)
                    .map_err(|e| UpdateResult::err(Code::CapacityExhausted, e.to_string()))?,
            );
            // Fill with the plain walk: the Bloom part stays free for bursts.
            if keys
                .iter()
                .all(|&(h, v)| f.insert_hash_with(h, v, None).is_ok())
            {
                p.report.grown.push(format!(
                    "{}: {} -> {} buckets",
                    domain_name(d),
                    old.buckets(),
                    f.buckets()
                ));
                match d {
                    Domain::Flow => {
                        p.flow_filter = Some(Arc::clone(&f));
                        p.ops.push(Op::SetFlowFilter(Arc::clone(&f)));
                    }
                    Domain::Class(c) => {
                        let is_new =
                            p.class_filters.contains_key(c) && !self.classes.contains_key(c);
                        p.class_filters.insert(*c, Arc::clone(&f));
                        if is_new {
                            // Not published yet: fix the pending AddClass.
                            for op in &mut p.ops {
                                if let Op::AddClass(oc, of) = op {
                                    if oc == c {
                                        *of = Arc::clone(&f);
                                    }
                                }
                            }
                        } else {
                            p.ops.push(Op::SetClassFilter(*c, Arc::clone(&f)));
                        }
                    }
                }
                return Ok(f);
            }
            log2 += 1;
        }
    }

    /// (hash, value) of every key of a domain as the batch leaves it so far.
    fn domain_keys(&self, p: &Pending, d: &Domain) -> Vec<(u64, u32)> {
        let in_domain = |m: &Match| match (d, domain_and_hash(m)) {
            (Domain::Flow, (Domain::Flow, h)) => Some(h),
            (Domain::Class(c), (Domain::Class(c2), h)) if *c == c2 => Some(h),
            _ => None,
        };
        let committed = self
            .rules
            .iter()
            .filter(|(id, _)| !p.ids.contains_key(*id))
            .map(|(_, s)| s);
        let pending = p.ids.values().flatten();
        committed
            .chain(pending)
            .filter_map(|s| in_domain(&s.rule.matcher).map(|h| (h, self.value_for(s.slot))))
            .collect()
    }

    fn queue_insert_op(p: &mut Pending, rule: &Rule, slot: u32) {
        let e = Entry {
            id: rule.id,
            action: rule.action,
            slot,
        };
        match domain_and_hash(&rule.matcher) {
            (Domain::Flow, _) => {
                let Match::Flow(k) = rule.matcher else {
                    unreachable!()
                };
                p.ops.push(Op::InsertFlow(k, e));
            }
            (Domain::Class(c), _) => {
                p.ops
                    .push(Op::InsertPrefix(c, prefix_addr(&rule.matcher), e));
                *p.class_delta.entry(c).or_default() += 1;
            }
        }
    }

    fn queue_remove(&self, p: &mut Pending, s: &Stored) {
        let (d, h) = domain_and_hash(&s.rule.matcher);
        match &d {
            Domain::Flow => {
                let Match::Flow(k) = s.rule.matcher else {
                    unreachable!()
                };
                p.ops.push(Op::RemoveFlow(k));
            }
            Domain::Class(c) => {
                p.ops
                    .push(Op::RemovePrefix(*c, prefix_addr(&s.rule.matcher)));
                *p.class_delta.entry(*c).or_default() -= 1;
            }
        }
        if let Some(f) = self.current_filter(p, &d) {
            p.removals.push((f, h, self.value_for(s.slot)));
        }
    }

    /// One update: validated against the overlay; with `execute`, also
    /// carried out on the filters and queued as table operations.
    fn step(
        &mut self,
        p: &mut Pending,
        u: &Update,
        execute: bool,
        hints: &ClassHints,
    ) -> Result<(), UpdateResult> {
        match u {
            Update::Insert(r) => {
                if self.get_id(p, r.id).is_some() {
                    return Err(UpdateResult::err(
                        Code::AlreadyExists,
                        format!("rule id {} exists", r.id),
                    ));
                }
                if let Some(o) = self.get_match(p, &r.matcher) {
                    return Err(UpdateResult::err(
                        Code::AlreadyExists,
                        format!("rule id {o} has the same match"),
                    ));
                }
                let slot = self.alloc_slot(p, execute).ok_or_else(|| {
                    UpdateResult::err(
                        Code::CapacityExhausted,
                        format!("max_rules = {} rules installed", self.cfg.max_rules),
                    )
                })?;
                if execute {
                    if let Err(e) = self.place(p, r, slot, hints) {
                        p.new_slots.retain(|&s| s != slot);
                        self.free_slots.push(slot);
                        return Err(e);
                    }
                    Self::queue_insert_op(p, r, slot);
                    p.effective.push(*u);
                }
                p.ids.insert(r.id, Some(Stored { rule: *r, slot }));
                p.matches.insert(r.matcher, Some(r.id));
            }
            Update::Delete(id) => {
                let s = self.get_id(p, *id).ok_or_else(|| {
                    UpdateResult::err(Code::NotFound, format!("no rule with id {id}"))
                })?;
                if execute {
                    self.queue_remove(p, &s);
                    p.freed_slots.push(s.slot);
                    p.effective.push(*u);
                }
                p.ids.insert(*id, None);
                p.matches.insert(s.rule.matcher, None);
            }
            Update::Modify(r) => {
                let old = self.get_id(p, r.id).ok_or_else(|| {
                    UpdateResult::err(Code::NotFound, format!("no rule with id {}", r.id))
                })?;
                let same_match = old.rule.matcher == r.matcher;
                if !same_match {
                    if let Some(o) = self.get_match(p, &r.matcher) {
                        return Err(UpdateResult::err(
                            Code::AlreadyExists,
                            format!("rule id {o} has the same match"),
                        ));
                    }
                }
                if execute {
                    if same_match {
                        Self::queue_insert_op(p, r, old.slot);
                        if let (Domain::Class(c), _) = domain_and_hash(&r.matcher) {
                            // An overwrite, not a new entry.
                            *p.class_delta.entry(c).or_default() -= 1;
                        }
                    } else {
                        self.place(p, r, old.slot, hints)?;
                        self.queue_remove(p, &old);
                        Self::queue_insert_op(p, r, old.slot);
                    }
                    p.effective.push(*u);
                }
                p.ids.insert(
                    r.id,
                    Some(Stored {
                        rule: *r,
                        slot: old.slot,
                    }),
                );
                if !same_match {
                    p.matches.insert(old.rule.matcher, None);
                }
                p.matches.insert(r.matcher, Some(r.id));
            }
        }
        Ok(())
    }

    /// Undoes a batch's filter inserts and slot allocations.
    fn undo(&mut self, p: &mut Pending) {
        for (f, h, v) in p.inserted.drain(..).rev() {
            f.remove_hash(h, v);
        }
        for s in p.new_slots.drain(..) {
            self.free_slots.push(s);
        }
    }

    fn commit(&mut self, p: &mut Pending, generation: u64) {
        for &slot in &p.new_slots {
            let now = self.stats.slot_totals(slot);
            self.baselines.insert(slot, now);
        }
        for op in p.ops.drain(..) {
            self.w.append(op);
        }
        self.w.append(Op::SetGeneration(generation));
        self.w.publish();
        // Wait until no worker reads the copy from before the swap: after
        // this second publish, deleted keys are unreachable from any copy.
        self.w.publish();
        self.generation = generation;
        for (f, h, v) in p.removals.drain(..) {
            f.remove_hash(h, v);
        }
        for s in p.freed_slots.drain(..) {
            self.baselines.remove(&s);
            self.free_slots.push(s);
        }
        for (id, s) in p.ids.drain() {
            match s {
                Some(s) => {
                    self.rules.insert(id, s);
                }
                None => {
                    self.rules.remove(&id);
                }
            }
        }
        for (m, id) in p.matches.drain() {
            match id {
                Some(id) => {
                    self.by_match.insert(m, id);
                }
                None => {
                    self.by_match.remove(&m);
                }
            }
        }
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
        if !emptied.is_empty() {
            for c in emptied {
                self.classes.remove(&c);
                self.w.append(Op::RemoveClass(c));
            }
            self.w.publish();
        }
    }
}

type ClassHints = HashMap<PrefixClass, usize>;

/// How many keys each prefix class gets from a batch (to size new filters).
fn class_hints(batch: &Batch) -> ClassHints {
    let mut h = ClassHints::new();
    for u in batch.updates.iter().flatten() {
        if let Update::Insert(r) | Update::Modify(r) = u {
            if let (Domain::Class(c), _) = domain_and_hash(&r.matcher) {
                *h.entry(c).or_default() += 1;
            }
        }
    }
    h
}

/// Marks every update but `failed` (and those already failing) aborted.
fn abort_results(results: &mut [UpdateResult], failed: Option<usize>) {
    for (i, r) in results.iter_mut().enumerate() {
        if Some(i) != failed && r.code == Code::Ok {
            *r = UpdateResult::err(
                Code::Aborted,
                "not applied: another update of the batch failed",
            );
        }
    }
}

fn domain_name(d: &Domain) -> String {
    match d {
        Domain::Flow => "flow".into(),
        Domain::Class(c) => class_name(c),
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
