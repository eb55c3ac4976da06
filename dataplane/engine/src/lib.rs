//! # cfdp-engine — what a worker does with a burst
//!
//! The heart of the data plane, with no I/O and no `unsafe`:
//!
//! * [`tables`]: the published rule tables workers read (filters, exact
//!   tables, slots) and the operations that change them; the one classifier.
//! * [`shared`]: the exact tables' map, whose bulk both copies share.
//! * [`matcher`]: matching a burst through the filters (modes `verify`,
//!   `filter-only`, `exact`), with batched prefetching lookups.
//! * [`worker`]: decode → fragments → hash → match → verdict → counters for
//!   one burst; the shared [`WorkerContext`]; `judge`: the verdicts and
//!   their counters.
//! * [`stages`]: where a worker's time goes, stage by stage, on a sample
//!   of its bursts.
//! * [`stats`]: per-worker counters published once per burst, per-rule
//!   counters, the burst-time histogram and the typed [`StatsSnapshot`].
//! * [`backend`]: the [`Backend`] trait every packet source implements and
//!   the one worker loop, [`run_worker`], that pcap replay, DPDK and the
//!   benchmarks all run.
//!
//! Data flows one way: backends (`cfdp-pcap`, `cfdp-dpdk`) call into this
//! crate; the rule store (`cfdp-control`) writes the tables it reads.
#![forbid(unsafe_code)]

pub mod acl;
pub mod backend;
pub mod export;
pub mod frame;
mod judge;
pub mod matcher;
pub mod shared;
pub mod stages;
pub mod stats;
pub mod tables;
pub mod trace;
mod track;
pub mod worker;

pub use backend::{run_worker, Backend, Frames, Limit, MemoryBackend, RunEnd, Rx};
pub use matcher::{filter_params, FingerprintTooNarrow, Mode, MAX_BURST};
pub use shared::SharedMap;
pub use stats::{LiveStats, RuleCount, StatsSnapshot, Totals};
pub use tables::{key_check, ClassPart, FoldJob, Folded, Frozen, Op, RuleRef, SlotRule, Tables};
pub use trace::{TableTrace, TraceStep};
pub use worker::{
    FlowTable, PacketRef, Released, Verdict, Worker, WorkerContext, WorkerOptions, FRAG_CAPACITY,
    FRAG_PER_SOURCE, FRAG_TTL_NS, HOLD_LIMITS,
};

#[cfg(test)]
mod tests {
    use cfdp_rules::FlowKey;

    /// The rule model hashes keys itself (it has no filter dependency); the
    /// filter's snapshots record its hash function. They must be the same.
    #[test]
    fn rule_keys_hash_with_the_filters_hash() {
        let b = b"10.0.0.1 10.0.0.2 6 1234 80";
        assert_eq!(cfdp_rules::hash_bytes(b), cfdp_filter::hash::hash_bytes(b));
        let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 1234, 80);
        assert_ne!(k.hash(), 0);
    }
}
