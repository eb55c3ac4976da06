//! Run statistics: per-worker counters, each worker's on its own cache
//! lines (written only by that worker, read by anyone, merged on demand),
//! per-rule counters for `count` rules, and a histogram of per-burst
//! processing time.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// Per-rule packet and byte counters (for `count` rules), one set per worker.
#[derive(Debug)]
pub struct RuleCounters {
    pub packets: Vec<AtomicU64>,
    pub bytes: Vec<AtomicU64>,
}

impl RuleCounters {
    pub fn new(rules: usize) -> Self {
        Self {
            packets: (0..rules).map(|_| AtomicU64::new(0)).collect(),
            bytes: (0..rules).map(|_| AtomicU64::new(0)).collect(),
        }
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
