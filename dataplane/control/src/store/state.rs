//! The rule store itself: its state, construction and plain accessors.
//! The stages (`transaction`, `publish`, `grow`, `bulk`, `views`) add
//! their methods in their own files.

use std::sync::Arc;

use cfdp_engine::{LiveStats, Mode, Op, Tables, WorkerContext};
use cfdp_filter::Filter;
use cfdp_rules::{Match, PrefixClass, Rule};
use hashbrown::HashMap;
use left_right::{ReadHandleFactory, WriteHandle};

use super::config::StoreConfig;
use super::ruleset::RuleSet;
use super::slots::{CountRules, Slots};
use super::types::{StoreError, Unsettled};

/// The authoritative rule set and the writer of the published tables.
pub struct RuleStore {
    pub(super) cfg: StoreConfig,
    pub(super) w: WriteHandle<Tables, Op>,
    pub(super) factory: ReadHandleFactory<Tables>,
    pub(super) stats: Arc<LiveStats>,
    pub(super) rules: RuleSet,
    pub(super) flow_filter: Arc<Filter>,
    pub(super) classes: HashMap<PrefixClass, (Arc<Filter>, usize)>,
    /// Counter slots: free list and recycled slots' baselines.
    pub(super) slots: Slots,
    /// The `count` rules by id (kept at commit): `stats` and every scrape
    /// report them without walking the whole rule set.
    pub(super) count_rules: CountRules,
    pub(super) generation: u64,
    /// The second half of the last commit, when not yet run (`settle`).
    pub(super) unsettled: Option<Unsettled>,
    /// The exact tables' fold in progress, merging on its own thread
    /// (see `publish`).
    pub(super) fold: Option<std::thread::JoinHandle<cfdp_engine::Folded>>,
    /// Folds started and landed.
    pub(super) folds: (u64, u64),
    /// The multi-field rules' compile thread, once one started, and its
    /// build in flight (see `recompile`).
    pub(super) compiler: Option<super::types::Compiler>,
    pub(super) compiles: super::types::CompileStats,
    /// Multi-field rules at the last compile refused whole (no family
    /// compiled, even in part).
    pub(super) compile_refused_at: Option<usize>,
    /// The connections of stateful rules, which the workers keep; the
    /// store hands the table to them and reads it for `stats` and `conns`.
    pub(super) conntrack: Option<Arc<cfdp_conntrack::ConnTable>>,
}

impl RuleStore {
    /// An empty store. `stats` must be the live statistics the workers
    /// write (their per-rule counters are allocated from here).
    pub fn new(cfg: StoreConfig, stats: Arc<LiveStats>) -> Result<Self, StoreError> {
        cfg.check_max_rules()?;
        let flow_filter = cfg.new_filter(cfg.flow_capacity)?;
        let (w, r) = left_right::new_from_empty::<Tables, Op>(
            Tables::new(Arc::clone(&flow_filter), cfg.mode == Mode::FilterOnly)
                .with_hash_secret(cfg.hash_secret),
        );
        let factory = r.factory();
        let rules = if cfg.mode == Mode::FilterOnly {
            RuleSet::with_match_index()
        } else {
            RuleSet::default()
        };
        Ok(Self {
            slots: Slots::new(cfg.max_rules, 0),
            cfg,
            w,
            factory,
            stats,
            rules,
            flow_filter,
            classes: HashMap::new(),
            count_rules: CountRules::new(Default::default()),
            generation: 0,
            unsettled: None,
            fold: None,
            folds: (0, 0),
            compiler: None,
            compiles: Default::default(),
            compile_refused_at: None,
            conntrack: None,
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
        Self::fixed_tracked(rules, mode, workers, None)
    }

    /// [`Self::fixed`] with a connection table for its stateful rules.
    pub fn fixed_tracked(
        rules: impl Into<Vec<Rule>>,
        mode: Mode,
        workers: usize,
        conntrack: Option<Arc<cfdp_conntrack::ConnTable>>,
    ) -> Result<(RuleStore, WorkerContext), StoreError> {
        let rules = rules.into();
        let cfg = StoreConfig {
            mode,
            ..Default::default()
        };
        let stats = Arc::new(LiveStats::new(workers, cfg.max_rules.max(rules.len())));
        let mut store = RuleStore::with_rules(cfg, stats, rules)?;
        store.conntrack = conntrack;
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
        cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: impl Into<Vec<Rule>>,
    ) -> Result<Self, StoreError> {
        Self::load(cfg, stats, rules.into(), true)
    }

    /// [`RuleStore::with_rules`] without waiting for the multi-field
    /// rules' compiled layer: the store starts with every such rule in
    /// the live layer (exact, slower), and the compile runs on its own
    /// thread once the control thread calls
    /// [`RuleStore::finish_compile`] (its idle loop does), landing like any
    /// recompile. What `cfdp run` loads with: a 100k-rule set is serving in
    /// the time of its tables (0.13 s), not of its tree (another 0.9 s).
    pub fn with_rules_compiled_later(
        cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: impl Into<Vec<Rule>>,
    ) -> Result<Self, StoreError> {
        Self::load(cfg, stats, rules.into(), false)
    }

    fn load(
        mut cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: Vec<Rule>,
        compile_now: bool,
    ) -> Result<Self, StoreError> {
        let flows = rules
            .iter()
            .filter(|r| matches!(r.matcher, Match::Flow(_)))
            .count();
        cfg.flow_capacity = cfg.flow_capacity.max(flows + flows / 8);
        cfg.max_rules = cfg.max_rules.max(rules.len());
        if rules.is_empty() {
            return Self::new(cfg, stats);
        }
        Self::build(cfg, stats, rules, compile_now)
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
            conntrack: self.conntrack.clone(),
        }
    }

    /// Gives the workers made from here on (`worker_context`) a connection
    /// table: stateful rules then track connections. Without one they act
    /// as their plain actions.
    pub fn set_conntrack(&mut self, table: Arc<cfdp_conntrack::ConnTable>) {
        self.conntrack = Some(table);
    }

    pub fn conntrack(&self) -> Option<&Arc<cfdp_conntrack::ConnTable>> {
        self.conntrack.as_ref()
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
