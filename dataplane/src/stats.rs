//! Run statistics: per-worker counters, each worker's on its own cache
//! lines (written only by that worker, read by anyone, merged on demand),
//! per-rule hit counters (every rule; `count` rules are reported by
//! default), and a histogram of per-burst
//! processing time. Everything a worker writes is readable while it runs
//! (`LiveStats`), which is what the control plane's `stats` serves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::decode::{Malformed, NonIp};

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

        impl WorkerCounters {
            pub fn add_to(&self, t: &mut Totals) {
                $(t.$name += self.$name.load(Ordering::Relaxed);)*
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
);

impl WorkerCounters {
    #[inline(always)]
    pub fn inc(c: &AtomicU64, by: u64) {
        // Single writer: a load and a store, no locked instruction.
        c.store(c.load(Ordering::Relaxed) + by, Ordering::Relaxed);
    }
}

/// Rules per counter chunk.
pub const SLOT_CHUNK: usize = 4096;

/// Per-rule packet and byte counters of one worker, indexed by rule slot.
///
/// Chunks of [`SLOT_CHUNK`] rules are allocated by the control thread when
/// it hands out a slot in a new chunk, before the rule is published
/// ([`SlotCounters::ensure`]); the worker only reads the chunk pointer and
/// bumps two counters, so it never allocates. Memory follows the rules in
/// use, not `max_rules`.
#[derive(Debug)]
pub struct SlotCounters {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl SlotCounters {
    pub fn new(max_slots: usize) -> Self {
        let n = max_slots.div_ceil(SLOT_CHUNK).max(1);
        Self {
            chunks: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Makes sure `slot`'s chunk exists (control thread). False when the
    /// slot is beyond `max_slots`.
    pub fn ensure(&self, slot: u32) -> bool {
        match self.chunks.get(slot as usize / SLOT_CHUNK) {
            Some(c) => {
                c.get_or_init(|| (0..2 * SLOT_CHUNK).map(|_| AtomicU64::new(0)).collect());
                true
            }
            None => false,
        }
    }

    /// Counts one packet of `bytes` for `slot` (the owning worker only).
    #[inline]
    pub fn add(&self, slot: u32, bytes: u64) {
        let s = slot as usize;
        if let Some(c) = self.chunks.get(s / SLOT_CHUNK).and_then(OnceLock::get) {
            let i = 2 * (s % SLOT_CHUNK);
            WorkerCounters::inc(&c[i], 1);
            WorkerCounters::inc(&c[i + 1], bytes);
        }
    }

    /// (packets, bytes) of `slot`.
    pub fn get(&self, slot: u32) -> (u64, u64) {
        let s = slot as usize;
        match self.chunks.get(s / SLOT_CHUNK).and_then(OnceLock::get) {
            Some(c) => {
                let i = 2 * (s % SLOT_CHUNK);
                (
                    c[i].load(Ordering::Relaxed),
                    c[i + 1].load(Ordering::Relaxed),
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
    /// Per-burst processing time. The worker records into its own
    /// histogram and folds it in here every [`HIST_FOLD_BURSTS`] bursts with
    /// a `try_lock` (never waits: if a reader holds the lock, it folds next
    /// time), so reading live percentiles costs the worker nothing.
    pub histogram: Mutex<Histogram<u64>>,
    /// Packets the backend could not hand to this worker (queue full).
    pub rx_dropped: AtomicU64,
    /// Packets a transmit queue did not accept, or sent to a port that
    /// does not exist (DPDK backend).
    pub tx_dropped: AtomicU64,
}

/// Bursts between folds of a worker's histogram into [`WorkerStats`].
pub const HIST_FOLD_BURSTS: u64 = 256;

/// Live statistics of every worker, shared by the backend (writers) and
/// the control plane (reader).
#[derive(Debug)]
pub struct LiveStats {
    pub workers: Vec<WorkerStats>,
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
                })
                .collect(),
        }
    }

    /// Allocates the counters of `slot` on every worker.
    pub fn ensure_slot(&self, slot: u32) -> bool {
        self.workers.iter().all(|w| w.rules.ensure(slot))
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

    /// All workers' burst-time histograms merged.
    pub fn burst_histogram(&self) -> Histogram<u64> {
        let mut h = burst_histogram();
        for w in &self.workers {
            let g = w.histogram.lock().unwrap_or_else(|e| e.into_inner());
            h.add(&*g).expect("same histogram bounds");
        }
        h
    }
}

/// Per-burst processing time in nanoseconds (1 ns .. 1 s, 3 significant digits).
pub fn burst_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1_000_000_000, 3).expect("valid histogram bounds")
}

/// Percentiles of a histogram, for reports.
#[derive(Clone, Debug, Serialize)]
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
