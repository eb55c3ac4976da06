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
//!    operations are published with one swap; after the answer (`settle`,
//!    or first thing in the next batch) the store waits until no worker
//!    reads the previous copy (a second publish) and only then removes
//!    deleted keys from the filters and recycles their slots.
//!
//! The code follows the stages: `transaction` (the overlay, validation,
//! execution and undo), `config` (filter sizing and growth), `publish` (the
//! commit and its safety argument; its second half, `settle`, runs after
//! the answer) and `views` (read-only answers, memory accounting);
//! `ruleset` holds the committed rules compactly (by counter slot), and
//! `bulk` loads a whole rule set at once (start-up, `cfdp replay`).
//!
//! Every batch is published with one swap whatever its atomicity mode, so
//! in verify and exact mode every packet sees the rule set from before or
//! after a whole batch. In filter-only mode the action comes from the
//! filter's value, which changes key by key: that mode refuses
//! `dataplane_atomic`.

use std::sync::Arc;

use cfdp_engine::{LiveStats, Mode, Op, RuleRef, Tables, WorkerContext};
use cfdp_filter::Filter;
use cfdp_rules::{Atomicity, Batch, Code, Match, PrefixClass, Rule, RuleId, Update, UpdateResult};
use hashbrown::HashMap;
use left_right::{ReadHandleFactory, WriteHandle};
use serde::Serialize;

use crate::journal::JournalError;

mod bulk;
mod config;
mod publish;
mod ruleset;
mod transaction;
mod views;

use ruleset::RuleSet;

pub use config::StoreConfig;
pub use views::{class_name, CountSlot, FilterStats, MemoryStats, OneFilter, RuleCount};

/// A committed rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stored {
    rule: Rule,
    slot: u32,
}

/// Why a batch was refused as a whole (no update was applied).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("expected generation {expected}, but the rule set is at generation {current}")]
    GenerationMismatch { expected: u64, current: u64 },
    /// The durability hook failed: nothing was published.
    #[error("batch not applied: journal: {0}")]
    NotDurable(#[source] JournalError),
    /// The batch cannot be honoured in this configuration.
    #[error("{0}")]
    Refused(String),
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

/// Where a batch's time went, µs: what the controller waits for, stage by
/// stage (the request's JSON parse happens on the connection thread; the
/// response's serialization and write after this report).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Timing {
    /// Request line → JSON (connection thread) and JSON → typed batch.
    pub parse_us: u64,
    /// Every update checked against the overlay (all-or-nothing modes).
    pub validate_us: u64,
    /// Filter inserts and table operations.
    pub filter_us: u64,
    /// The durability hook: journal write + sync.
    pub journal_us: u64,
    pub journal_write_us: u64,
    pub journal_sync_us: u64,
    /// Publish to the workers, wait for them to leave the old copy, remove
    /// deleted keys.
    pub publish_us: u64,
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
    pub timing: Timing,
}

impl BatchReport {
    /// Whether every update succeeded.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| r.code == Code::Ok)
    }
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

/// A version number no earlier call returned (in this process).
fn fresh_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Why a rule store could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Slots are `u32`: `max_rules` must fit.
    #[error("max_rules = {0}: must be 1..=2^32-1")]
    MaxRules(usize),
    #[error(transparent)]
    Fingerprint(#[from] cfdp_engine::FingerprintTooNarrow),
    #[error("filter: {0}")]
    FilterConfig(#[from] cfdp_filter::ConfigError),
    /// A filter that cannot hold its keys even at the largest size.
    #[error("{name} filter: {placed} of {total} keys placed at 2^30 buckets")]
    TooLarge {
        name: String,
        placed: usize,
        total: usize,
    },
    #[error("{name} filter: {source} (enable auto_grow or raise its capacity)")]
    Build {
        name: String,
        #[source]
        source: cfdp_filter::BuildError,
    },
    /// A rule the set cannot take (a taken id or match, a bad value);
    /// `index` is its 0-based position.
    #[error("rule #{} (id {id}): {why}", index + 1)]
    Rule {
        index: usize,
        id: RuleId,
        why: String,
    },
}

/// Slots are `u32`: `max_rules` must fit.
fn check_max_rules(cfg: &StoreConfig) -> Result<(), StoreError> {
    if cfg.max_rules == 0 || cfg.max_rules > u32::MAX as usize {
        return Err(StoreError::MaxRules(cfg.max_rules));
    }
    Ok(())
}

/// Why an insert is refused: its id is taken (batches and rule files say
/// the same).
fn id_taken(id: RuleId) -> String {
    format!("id: rule id {id} exists")
}

/// Why an insert or modify is refused: another rule has its match.
fn match_taken(other: RuleId) -> String {
    format!("match: same match as rule id {other}")
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
    rules: RuleSet,
    flow_filter: Arc<Filter>,
    classes: HashMap<PrefixClass, (Arc<Filter>, usize)>,
    free_slots: Vec<u32>,
    next_slot: u32,
    /// Counter totals of a slot when its current rule got it.
    baselines: HashMap<u32, (u64, u64)>,
    /// The `count` rules by id (kept at commit): `stats` and every scrape
    /// report them without walking the whole rule set.
    count_rules: std::collections::BTreeMap<RuleId, u32>,
    /// Changes whenever `count_rules` does, to a value no other state of
    /// any store had (see [`RuleStore::count_rules_version`]).
    count_version: u64,
    generation: u64,
    /// The second half of the last commit, when not yet run (`settle`).
    unsettled: Option<publish::Unsettled>,
    /// The exact tables' fold in progress, merging on its own thread
    /// (see `publish`).
    fold: Option<std::thread::JoinHandle<cfdp_engine::Folded>>,
    /// Folds started and landed.
    folds: (u64, u64),
}

impl RuleStore {
    /// An empty store. `stats` must be the live statistics the workers
    /// write (their per-rule counters are allocated from here).
    pub fn new(cfg: StoreConfig, stats: Arc<LiveStats>) -> Result<Self, StoreError> {
        check_max_rules(&cfg)?;
        let flow_filter = cfg.new_filter(cfg.flow_capacity)?;
        let (w, r) = left_right::new_from_empty::<Tables, Op>(Tables::new(
            Arc::clone(&flow_filter),
            cfg.mode == Mode::FilterOnly,
        ));
        let factory = r.factory();
        let rules = if cfg.mode == Mode::FilterOnly {
            RuleSet::with_match_index()
        } else {
            RuleSet::default()
        };
        Ok(Self {
            cfg,
            w,
            factory,
            stats,
            rules,
            flow_filter,
            classes: HashMap::new(),
            free_slots: Vec::new(),
            next_slot: 0,
            baselines: HashMap::new(),
            count_rules: Default::default(),
            count_version: fresh_version(),
            generation: 0,
            unsettled: None,
            fold: None,
            folds: (0, 0),
        })
    }

    /// A store holding a fixed rule set, with statistics for `workers`
    /// workers, and the context its workers read (`cfdp replay`, tests,
    /// benchmarks). Keep the store alive while the workers run.
    pub fn fixed(
        rules: impl Into<Vec<Rule>>,
        mode: Mode,
        workers: usize,
    ) -> Result<(RuleStore, WorkerContext), StoreError> {
        let rules = rules.into();
        let cfg = StoreConfig {
            mode,
            ..Default::default()
        };
        let stats = Arc::new(LiveStats::new(workers, cfg.max_rules.max(rules.len())));
        let store = RuleStore::with_rules(cfg, stats, rules)?;
        let cx = store.worker_context();
        Ok((store, cx))
    }

    /// A store holding `rules`, validated like one all-or-nothing batch
    /// (the first problem is the error, naming the rule by position and id:
    /// `rule #2 (id 7): ...`) and built in bulk: tables at their final
    /// size, filters by `Filter::build`, no operation log (see `bulk`).
    /// A `Vec` is taken as it is (it becomes the rule store); a slice is
    /// copied.
    pub fn with_rules(
        mut cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: impl Into<Vec<Rule>>,
    ) -> Result<Self, StoreError> {
        let rules = rules.into();
        let flows = rules
            .iter()
            .filter(|r| matches!(r.matcher, Match::Flow(_)))
            .count();
        cfg.flow_capacity = cfg.flow_capacity.max(flows + flows / 8);
        cfg.max_rules = cfg.max_rules.max(rules.len());
        if rules.is_empty() {
            return Self::new(cfg, stats);
        }
        Self::build(cfg, stats, rules)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn mode(&self) -> Mode {
        self.cfg.mode
    }

    /// What the workers of a backend need to read this store's tables.
    pub fn worker_context(&self) -> WorkerContext {
        WorkerContext {
            mode: self.cfg.mode,
            readers: self.readers(),
            stats: Arc::clone(&self.stats),
        }
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
}
