//! The control plane's statistics, typed: the data plane's
//! [`StatsSnapshot`] plus what the control thread knows (generation, rules,
//! filters, batch latencies). `stats` on the socket and every Prometheus
//! scrape read the same [`ControlStats`].
//!
//! The control thread publishes its part ([`PlaneView`]) on a
//! [`StatsBoard`] after every request (before the response goes out) and
//! after migration steps; readers combine it with the workers' live
//! counters. So a scrape never waits behind a batch in the control thread.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use cfdp_engine::{LiveStats, StatsSnapshot};
use serde::Serialize;

use crate::store::{CompileStats, CountSlot, FilterStats, MemoryStats, RuleCount};

/// Batch wall-time summary, µs.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Latency {
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// Batches answered, by outcome.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct BatchCounts {
    pub applied: u64,
    pub refused: u64,
}

/// The journal's state.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct JournalStats {
    /// Records since the last snapshot.
    pub records: u64,
}

/// What the control thread publishes about itself.
#[derive(Clone, Debug)]
pub struct PlaneView {
    pub generation: u64,
    pub rules: usize,
    pub started: Instant,
    /// Shared with the control thread's cache: rebuilt only when it changes.
    pub count_rules: Arc<Vec<CountSlot>>,
    pub filter: FilterStats,
    pub memory: MemoryStats,
    pub batch_us: Latency,
    pub batches: BatchCounts,
    pub migrated: u64,
    pub requests: u64,
    pub journal: Option<JournalStats>,
    pub acl_compiles: CompileStats,
    /// The workers' connection table (read live by `stats`).
    pub conntrack: Option<Arc<cfdp_conntrack::ConnTable>>,
}

/// The connection table of stateful rules, as `stats` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct ConntrackStats {
    pub capacity: usize,
    /// Entries held (expired ones not yet swept included).
    pub entries: usize,
    /// Live entries by state, named as Linux names them.
    pub by_state: std::collections::BTreeMap<&'static str, u64>,
    pub opened: u64,
    /// New connections refused because the table was full.
    pub refused: u64,
    /// Unanswered entries dropped to make room for new connections.
    pub early_dropped: u64,
    pub expired: u64,
    /// Lookups the table's filter let through that no entry confirmed.
    pub false_positives: u64,
    /// Packets of a tracked connection that were invalid for it (out of
    /// its TCP window, a flag combination or state it cannot be in):
    /// they met the rules alone, as `ct state invalid` packets do.
    pub invalid: u64,
    pub memory_bytes: usize,
}

impl ConntrackStats {
    /// Reads the table (a pass over its stripes).
    pub fn of(t: &cfdp_conntrack::ConnTable) -> Self {
        let c = t.counts();
        Self {
            capacity: t.capacity(),
            entries: t.len(),
            by_state: cfdp_conntrack::State::ALL
                .iter()
                .map(|s| (s.name(), c.by_state[s.index()]))
                .collect(),
            opened: c.opened,
            refused: c.refused,
            early_dropped: c.early_dropped,
            expired: c.expired,
            false_positives: c.false_positives,
            invalid: c.invalid,
            memory_bytes: t.memory_bytes(),
        }
    }
}

/// Everything `stats` answers.
#[derive(Clone, Debug, Serialize)]
pub struct ControlStats {
    pub generation: u64,
    pub rules: usize,
    pub uptime_s: f64,
    #[serde(flatten)]
    pub dataplane: StatsSnapshot,
    /// Counters of the `count` rules (every rule has counters: `get`/`rules`).
    pub rule_counters: Vec<RuleCount>,
    pub filter: FilterStats,
    /// Heap memory of the rule set by component.
    pub memory: MemoryStats,
    pub batch_us: Latency,
    pub batches: BatchCounts,
    pub migrated: u64,
    pub requests: u64,
    pub journal: Option<JournalStats>,
    /// The multi-field rules' background compiles (`store::recompile`).
    pub acl_compiles: CompileStats,
    /// Connection tracking (stateful rules); `null` without a table.
    pub conntrack: Option<ConntrackStats>,
}

impl ControlStats {
    /// Combines a published view with the workers' live counters.
    pub fn read(view: &PlaneView, live: &LiveStats) -> Self {
        // Rule counters after the snapshot: they cover at least the packets
        // the snapshot counts (see `WorkerCounters::add_to`).
        let dataplane = live.snapshot();
        Self {
            generation: view.generation,
            rules: view.rules,
            uptime_s: view.started.elapsed().as_secs_f64(),
            rule_counters: view.count_rules.iter().map(|c| c.read(live)).collect(),
            dataplane,
            filter: view.filter.clone(),
            memory: view.memory,
            batch_us: view.batch_us,
            batches: view.batches,
            migrated: view.migrated,
            requests: view.requests,
            journal: view.journal,
            acl_compiles: view.acl_compiles,
            conntrack: view.conntrack.as_deref().map(ConntrackStats::of),
        }
    }
}

/// Where the control thread publishes its [`PlaneView`] for readers on
/// other threads (connection threads, the metrics exporter).
#[derive(Clone, Debug)]
pub struct StatsBoard {
    view: Arc<Mutex<Arc<PlaneView>>>,
    live: Arc<LiveStats>,
    /// Every batch's wall time, seconds, as a Prometheus histogram (the
    /// control thread observes, scrapes read; atomics inside).
    pub batch_seconds: prometheus_client::metrics::histogram::Histogram,
}

impl StatsBoard {
    pub fn new(first: PlaneView, live: Arc<LiveStats>) -> Self {
        Self {
            view: Arc::new(Mutex::new(Arc::new(first))),
            live,
            batch_seconds: batch_histogram(),
        }
    }

    /// Replaces the published view (control thread).
    pub fn publish(&self, v: PlaneView) {
        *self
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(v);
    }

    /// The latest view (held only for an `Arc` clone).
    pub fn view(&self) -> Arc<PlaneView> {
        Arc::clone(
            &self
                .view
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The workers' live statistics.
    pub fn live(&self) -> &Arc<LiveStats> {
        &self.live
    }

    /// The current statistics.
    pub fn read(&self) -> ControlStats {
        ControlStats::read(&self.view(), &self.live)
    }
}

/// The batch-latency histogram's bucket bounds (seconds): 50 µs × 2^k up
/// to ~6.6 s.
pub fn batch_histogram() -> prometheus_client::metrics::histogram::Histogram {
    use prometheus_client::metrics::histogram::exponential_buckets;
    prometheus_client::metrics::histogram::Histogram::new(exponential_buckets(50e-6, 2.0, 18))
}
