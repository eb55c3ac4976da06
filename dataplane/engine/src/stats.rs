//! Run statistics: per-worker counters, each worker's on its own cache
//! lines (written only by that worker, read by anyone, merged on demand),
//! per-rule hit counters (every rule; `count` rules are reported by
//! default), and a histogram of burst times (a burst's receive, processing
//! and transmit). Everything a
//! worker writes is readable while it runs ([`LiveStats`]), and every
//! reader — the control plane's `stats`, the Prometheus exporter, the
//! replay and run reports — reads it through one typed
//! [`StatsSnapshot`].
//!
//! A worker counts into plain local integers ([`LocalCounters`]) while it
//! processes a burst and publishes them with one store per counter at the
//! end of the burst ([`WorkerCounters::publish`]): no shared-memory
//! read-modify-write per packet. `packets` is also stored when a burst
//! starts, so a reader never sees a rule hit for a packet the totals do not
//! count yet (see `Worker::process`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cfdp_packet::{Malformed, NonIp};
use cfdp_rules::RuleId;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stages::{StageCounters, StageTimes};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters. Relaxed atomics: one writer, and readers
        /// only want a recent value.
        #[derive(Debug, Default)]
        #[repr(align(64))]
        pub struct WorkerCounters {
            $(pub $name: AtomicU64,)*
            pub malformed_by: [AtomicU64; Malformed::ALL.len()],
            pub non_ip_by: [AtomicU64; NonIp::ALL.len()],
        }

        /// A merged, plain snapshot of counters.
        #[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
        pub struct Totals {
            $(pub $name: u64,)*
        }

        impl Totals {
            /// Adds `o` field by field.
            pub fn add(&mut self, o: &Totals) {
                $(self.$name += o.$name;)*
            }
        }

        impl WorkerCounters {
            /// Adds this worker's published counters to `t`. `packets` is
            /// loaded first, with acquire ordering: everything the worker
            /// counted up to that publish (per-rule counters included) is
            /// visible to the caller afterwards.
            pub fn add_to(&self, t: &mut Totals) {
                t.packets += self.packets.load(Ordering::Acquire);
                $(if stringify!($name) != "packets" {
                    t.$name += self.$name.load(Ordering::Relaxed);
                })*
            }

            /// Publishes a worker's running totals (the owning worker only).
            /// `packets` is stored last, with release ordering (see `add_to`).
            pub fn publish(&self, l: &LocalCounters) {
                $(if stringify!($name) != "packets" {
                    self.$name.store(l.totals.$name, Ordering::Relaxed);
                })*
                for (a, v) in self.malformed_by.iter().zip(&l.malformed_by) {
                    a.store(*v, Ordering::Relaxed);
                }
                for (a, v) in self.non_ip_by.iter().zip(&l.non_ip_by) {
                    a.store(*v, Ordering::Relaxed);
                }
                self.packets.store(l.totals.packets, Ordering::Release);
            }

            /// The published values, to continue counting from (a worker
            /// that takes over an index keeps its predecessor's counts).
            pub fn load(&self) -> LocalCounters {
                let mut l = LocalCounters::default();
                self.add_to(&mut l.totals);
                for (v, a) in l.malformed_by.iter_mut().zip(&self.malformed_by) {
                    *v = a.load(Ordering::Relaxed);
                }
                for (v, a) in l.non_ip_by.iter_mut().zip(&self.non_ip_by) {
                    *v = a.load(Ordering::Relaxed);
                }
                l
            }
        }
    };
}

counters!(
    packets,
    bytes,
    ipv4,
    ipv6,
    non_ip,
    malformed,
    fragments,
    fragments_resolved,
    fragments_unresolved,
    fragments_released,
    fragments_timed_out,
    fragments_overflow,
    fragments_incomplete,
    fragments_duplicate,
    fragments_overlap,
    fragments_evicted,
    fragments_source_refused,
    ct_established,
    ct_related,
    ct_opened,
    ct_refused,
    matched,
    dropped,
    forwarded,
    redirected,
    counted,
    allowed,
    bursts,
    filter_verified,
    filter_false_positives,
    filter_only_sampled,
    filter_only_sampled_false,
    export_early,
);

/// A worker's running counters, in plain integers (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalCounters {
    pub totals: Totals,
    pub malformed_by: [u64; Malformed::ALL.len()],
    pub non_ip_by: [u64; NonIp::ALL.len()],
}

/// Adds to a counter only its own worker writes: a load and a store, no
/// locked instruction (per-rule counters, which are per packet).
#[inline(always)]
fn bump(c: &AtomicU64, by: u64) {
    c.store(c.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

/// Rules per counter chunk.
pub const SLOT_CHUNK: usize = 4096;

/// Per-rule packet and byte counters of one worker, indexed by rule slot,
/// with the time of each rule's last hit and the id of the rule the slot
/// was last given to (what flow export names a record's rule by).
///
/// Chunks of [`SLOT_CHUNK`] rules are allocated by the control thread when
/// it hands out a slot in a new chunk, before the rule is published
/// ([`SlotCounters::ensure`]); the worker only reads the chunk pointer and
/// bumps two counters, so it never allocates. Memory follows the rules in
/// use, not `max_rules`.
#[derive(Debug)]
pub struct SlotCounters {
    chunks: Box<[OnceLock<Chunk>]>,
}

#[derive(Debug)]
struct Chunk {
    /// Packets and bytes, two per slot.
    counts: Box<[AtomicU64]>,
    /// Last hit, in seconds since the statistics were created, plus one
    /// (0: never). Written at most once a second per rule.
    last: Box<[AtomicU32]>,
    /// The id of the rule each slot was last handed to (control thread,
    /// before the rule is published).
    rules: Box<[AtomicU32]>,
}

impl SlotCounters {
    pub fn new(max_slots: usize) -> Self {
        let n = max_slots.div_ceil(SLOT_CHUNK).max(1);
        Self {
            chunks: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Makes sure `slot`'s chunk exists and names `rule` the slot's rule
    /// (control thread, before the rule is published). False when the
    /// slot is beyond `max_slots`.
    pub fn ensure(&self, slot: u32, rule: RuleId) -> bool {
        let s = slot as usize;
        match self.chunks.get(s / SLOT_CHUNK) {
            Some(c) => {
                let c = c.get_or_init(|| Chunk {
                    counts: (0..2 * SLOT_CHUNK).map(|_| AtomicU64::new(0)).collect(),
                    last: (0..SLOT_CHUNK).map(|_| AtomicU32::new(0)).collect(),
                    rules: (0..SLOT_CHUNK).map(|_| AtomicU32::new(0)).collect(),
                });
                // Release: a worker that reads the slot from a rule table
                // published after this reads this id (or a later one).
                c.rules[s % SLOT_CHUNK].store(rule, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// The id of the rule `slot` was last handed to (`None`: a slot never
    /// handed out).
    pub fn rule(&self, slot: u32) -> Option<RuleId> {
        let s = slot as usize;
        self.chunks
            .get(s / SLOT_CHUNK)
            .and_then(OnceLock::get)
            .map(|c| c.rules[s % SLOT_CHUNK].load(Ordering::Acquire))
    }

    /// Heap bytes of the counter chunks allocated so far.
    pub fn memory_bytes(&self) -> usize {
        let chunk = SLOT_CHUNK
            * (2 * std::mem::size_of::<AtomicU64>() + 2 * std::mem::size_of::<AtomicU32>());
        self.chunks.len() * std::mem::size_of::<OnceLock<Chunk>>()
            + self.chunks.iter().filter(|c| c.get().is_some()).count() * chunk
    }

    /// Counts one packet of `bytes` for `slot` at `now_s` (seconds since
    /// the statistics were created, plus one; the owning worker only).
    #[inline]
    pub fn add(&self, slot: u32, bytes: u64, now_s: u32) {
        self.add_n(slot, 1, bytes, now_s);
    }

    /// [`Self::add`] for `packets` packets of `bytes` in all (a run of a
    /// burst's packets that hit one rule).
    #[inline]
    pub fn add_n(&self, slot: u32, packets: u64, bytes: u64, now_s: u32) {
        let s = slot as usize;
        if let Some(c) = self.chunks.get(s / SLOT_CHUNK).and_then(OnceLock::get) {
            let i = 2 * (s % SLOT_CHUNK);
            bump(&c.counts[i], packets);
            bump(&c.counts[i + 1], bytes);
            let last = &c.last[s % SLOT_CHUNK];
            if last.load(Ordering::Relaxed) != now_s {
                last.store(now_s, Ordering::Relaxed);
            }
        }
    }

    /// The last hit of `slot` (0: never; see [`SlotCounters::add`]).
    pub fn last_hit(&self, slot: u32) -> u32 {
        let s = slot as usize;
        self.chunks
            .get(s / SLOT_CHUNK)
            .and_then(OnceLock::get)
            .map_or(0, |c| c.last[s % SLOT_CHUNK].load(Ordering::Relaxed))
    }

    /// Forgets `slot`'s last hit (control thread, when the slot goes to a
    /// new rule; a burst of the old rule still in flight may set it again).
    pub fn clear_last_hit(&self, slot: u32) {
        let s = slot as usize;
        if let Some(c) = self.chunks.get(s / SLOT_CHUNK).and_then(OnceLock::get) {
            c.last[s % SLOT_CHUNK].store(0, Ordering::Relaxed);
        }
    }

    /// (packets, bytes) of `slot`.
    pub fn get(&self, slot: u32) -> (u64, u64) {
        let s = slot as usize;
        match self.chunks.get(s / SLOT_CHUNK).and_then(OnceLock::get) {
            Some(c) => {
                let i = 2 * (s % SLOT_CHUNK);
                (
                    c.counts[i].load(Ordering::Relaxed),
                    c.counts[i + 1].load(Ordering::Relaxed),
                )
            }
            None => (0, 0),
        }
    }
}

/// What one worker shares with the rest of the process while it runs.
#[derive(Debug)]
pub struct WorkerStats {
    pub counters: WorkerCounters,
    pub rules: SlotCounters,
    /// Burst times: from the worker loop's clock reading before a burst
    /// to the one after its transmit (receive, processing, transmit; a
    /// poll that found nothing or slept is not counted). The worker records into its own
    /// histogram and folds it in here every [`HIST_FOLD_INTERVAL`] with a
    /// `try_lock` (never waits: if a reader holds the lock, it folds next
    /// time), so reading live percentiles costs the worker nothing.
    pub histogram: Mutex<Histogram<u64>>,
    /// Packets the backend could not hand to this worker (queue full).
    pub rx_dropped: AtomicU64,
    /// Packets a transmit queue did not accept, or sent to a port that
    /// does not exist (DPDK backend).
    pub tx_dropped: AtomicU64,
    /// Time by stage on a sample of the bursts ([`crate::stages`]).
    pub stages: StageCounters,
}

/// How often a worker folds its histogram into [`WorkerStats`]: by time,
/// not by bursts — a fold walks every bucket (~300 k instructions), which
/// every 256 bursts cost 37 instructions a packet at full rate (callgrind,
/// `pipeline --passes`); ten times a second it costs nothing measurable.
pub const HIST_FOLD_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Live statistics of every worker, shared by the backend (writers) and
/// the control plane (reader).
#[derive(Debug)]
pub struct LiveStats {
    pub workers: Vec<WorkerStats>,
    /// The flow exporter's counters (zero when flows are not exported).
    pub export: Arc<cfdp_export::ExportCounters>,
    /// When these statistics were created: the origin of rules' last-hit
    /// times.
    started: std::time::Instant,
    started_unix: std::time::SystemTime,
}

impl LiveStats {
    pub fn new(workers: usize, max_slots: usize) -> Self {
        Self {
            workers: (0..workers.max(1))
                .map(|_| WorkerStats {
                    counters: WorkerCounters::default(),
                    rules: SlotCounters::new(max_slots),
                    histogram: Mutex::new(burst_histogram()),
                    rx_dropped: AtomicU64::new(0),
                    tx_dropped: AtomicU64::new(0),
                    stages: StageCounters::default(),
                })
                .collect(),
            export: Arc::default(),
            started: std::time::Instant::now(),
            started_unix: std::time::SystemTime::now(),
        }
    }

    /// Allocates the counters of `slot` on every worker, and names `rule`
    /// its rule.
    pub fn ensure_slot(&self, slot: u32, rule: RuleId) -> bool {
        self.workers.iter().all(|w| w.rules.ensure(slot, rule))
    }

    /// Heap bytes of every worker's per-rule counters.
    pub fn rule_counter_bytes(&self) -> usize {
        self.workers.iter().map(|w| w.rules.memory_bytes()).sum()
    }

    /// The last-hit clock value for `at` (see [`SlotCounters::add`]).
    #[inline]
    pub fn clock(&self, at: std::time::Instant) -> u32 {
        let s = at.saturating_duration_since(self.started).as_secs();
        u32::try_from(s).unwrap_or(u32::MAX - 1) + 1
    }

    /// When `slot` last matched a packet on any worker (Unix seconds), if
    /// ever since it was handed to its rule.
    pub fn slot_last_hit_unix_s(&self, slot: u32) -> Option<u64> {
        let last = self.workers.iter().map(|w| w.rules.last_hit(slot)).max()?;
        let base = self
            .started_unix
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        (last > 0).then(|| base + u64::from(last - 1))
    }

    /// Forgets `slot`'s last hit on every worker (see
    /// [`SlotCounters::clear_last_hit`]).
    pub fn clear_slot_last_hit(&self, slot: u32) {
        for w in &self.workers {
            w.rules.clear_last_hit(slot);
        }
    }

    /// Sum over workers of `slot`'s (packets, bytes).
    pub fn slot_totals(&self, slot: u32) -> (u64, u64) {
        self.workers.iter().fold((0, 0), |(p, b), w| {
            let (wp, wb) = w.rules.get(slot);
            (p + wp, b + wb)
        })
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for w in &self.workers {
            w.counters.add_to(&mut t);
        }
        t
    }

    pub fn rx_dropped(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.rx_dropped.load(Ordering::Relaxed))
            .sum()
    }

    pub fn tx_dropped(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.tx_dropped.load(Ordering::Relaxed))
            .sum()
    }

    /// Counters of every worker by cause, merged (names as in the reports).
    pub fn causes(&self) -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>) {
        let mut malformed_by = BTreeMap::new();
        let mut non_ip_by = BTreeMap::new();
        for w in &self.workers {
            for (i, m) in Malformed::ALL.iter().enumerate() {
                *malformed_by.entry(m.name()).or_default() +=
                    w.counters.malformed_by[i].load(Ordering::Relaxed);
            }
            for (i, k) in NonIp::ALL.iter().enumerate() {
                *non_ip_by.entry(k.name()).or_default() +=
                    w.counters.non_ip_by[i].load(Ordering::Relaxed);
            }
        }
        (malformed_by, non_ip_by)
    }

    /// The one typed view of the data plane's statistics: what `stats`,
    /// the Prometheus exporter and the reports show.
    pub fn snapshot(&self) -> StatsSnapshot {
        let workers: Vec<WorkerSnapshot> = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut totals = Totals::default();
                w.counters.add_to(&mut totals);
                WorkerSnapshot {
                    worker: i,
                    totals,
                    rx_dropped: w.rx_dropped.load(Ordering::Relaxed),
                    tx_dropped: w.tx_dropped.load(Ordering::Relaxed),
                    stages: w.stages.snapshot(),
                }
            })
            .collect();
        let mut totals = Totals::default();
        for w in &workers {
            totals.add(&w.totals);
        }
        let (malformed_by, non_ip_by) = self.causes();
        StatsSnapshot {
            totals,
            rx_dropped: workers.iter().map(|w| w.rx_dropped).sum(),
            tx_dropped: workers.iter().map(|w| w.tx_dropped).sum(),
            malformed_by,
            non_ip_by,
            burst_ns: Percentiles::of(&self.burst_histogram()),
            stages: StageTimes::sum(workers.iter().map(|w| &w.stages)),
            export: self.export.totals(),
            workers,
        }
    }

    /// All workers' burst-time histograms merged.
    pub fn burst_histogram(&self) -> Histogram<u64> {
        let mut h = burst_histogram();
        for w in &self.workers {
            let g = w
                .histogram
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            h.add(&*g).expect("same histogram bounds");
        }
        h
    }
}

/// Packets and bytes matched by one rule.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct RuleCount {
    pub id: cfdp_rules::RuleId,
    pub packets: u64,
    pub bytes: u64,
}

/// One worker's part of a [`StatsSnapshot`].
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorkerSnapshot {
    pub worker: usize,
    #[serde(flatten)]
    pub totals: Totals,
    /// Packets the backend could not hand to this worker (queue full).
    pub rx_dropped: u64,
    /// Packets a transmit queue did not take, or sent to a missing port.
    pub tx_dropped: u64,
    /// Time by stage on a sample of its bursts.
    pub stages: StageTimes,
}

/// The data plane's statistics at one moment, typed.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StatsSnapshot {
    pub totals: Totals,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub malformed_by: BTreeMap<&'static str, u64>,
    pub non_ip_by: BTreeMap<&'static str, u64>,
    pub burst_ns: Percentiles,
    /// Every worker's time by stage, summed (see [`crate::stages`]).
    pub stages: StageTimes,
    /// What the flow exporter sent (IPFIX; zeros without export).
    pub export: cfdp_export::ExportTotals,
    pub workers: Vec<WorkerSnapshot>,
}

/// Burst times (receive, processing, transmit) in nanoseconds (1 ns .. 1 s, 3 significant digits).
pub fn burst_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1_000_000_000, 3).expect("valid histogram bounds")
}

/// Percentiles of a histogram, for reports.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}
