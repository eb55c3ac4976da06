//! Rates of a classifier one key at a time and in bursts; a rule store
//! holding a set.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cfdp_bench::{median, BurstMatcher};
use cfdp_control::{RuleStore, StoreConfig};
use cfdp_engine::acl::AclClassifier;
use cfdp_engine::{LiveStats, Mode};
use cfdp_rules::{AclRule, FlowKey};

static PASSES: OnceLock<usize> = OnceLock::new();

/// Passes over the trace each timed measurement makes (`--passes`, 1 if
/// not said): `bench/classbench.sh` gives cfdp the passes it gives
/// `dpdk-test-acl` (`--iter`), so that both sides time the same work —
/// one pass over acl1_1k's 9,420 packets is ~0.3 ms, short enough for
/// the first lines it touches to weigh in.
pub(crate) fn passes() -> usize {
    PASSES.get().copied().unwrap_or(1)
}

/// Sets [`passes`] (once, from `main`).
pub(crate) fn set_passes(n: usize) {
    let _ = PASSES.set(n.max(1));
}

/// Median Mpps of `rounds` timings of [`passes`] passes each,
/// single-packet and in bursts of 32.
pub(crate) fn rates(c: &AclClassifier, keys: &[FlowKey], rounds: usize) -> (f64, f64) {
    let (single, batched, _) = rates_with(c, keys, rounds, None);
    (single, batched)
}

/// [`rates`], and with `store` the workers' matching over its published
/// tables ([`BurstMatcher`], bursts of 32) timed in the same rounds, right
/// after the classifier's bursts: this VM's speed moves for seconds at a
/// time, and the two rates taken in separate phases of a run differed by
/// ±12 % either way (acl1_1k 0.89×, acl1_10k 1.08× in one run). Returns
/// the medians and the median of each round's worker over batched rate.
pub(crate) fn rates_with(
    c: &AclClassifier,
    keys: &[FlowKey],
    rounds: usize,
    store: Option<&RuleStore>,
) -> (f64, f64, Option<(f64, f64)>) {
    let mut single = Vec::with_capacity(rounds);
    let mut batched = Vec::with_capacity(rounds);
    let mut worker = Vec::with_capacity(rounds);
    let mut ratio = Vec::with_capacity(rounds);
    let mut out = [None; 32];
    let packets = (keys.len() * passes()) as f64;
    let handle = store.map(|s| s.readers().handle());
    let tables = handle.as_ref().map(|h| h.enter().expect("published"));
    let mut m = BurstMatcher::default();
    if let Some(t) = &tables {
        // One untimed pass first, as the classifier's rates get (its probe
        // count): the first pass over a freshly published copy pays for its
        // cold caches and pages — 6.5 against 10.5 Mpps on acl1_100k, which
        // `--rounds 1` (bench/classbench.sh) reported as the worker rate.
        for burst in keys.chunks(32) {
            std::hint::black_box(m.run(t, burst));
        }
    }
    for _ in 0..rounds {
        let t = Instant::now();
        let mut hits = 0u64;
        for _ in 0..passes() {
            for k in keys {
                hits += u64::from(c.classify_id(k).is_some());
            }
        }
        single.push(packets / t.elapsed().as_secs_f64() / 1e6);
        std::hint::black_box(hits);
        let t = Instant::now();
        for _ in 0..passes() {
            for burst in keys.chunks(32) {
                c.classify_burst(burst, &mut out[..burst.len()]);
                std::hint::black_box(&out);
            }
        }
        batched.push(packets / t.elapsed().as_secs_f64() / 1e6);
        if let Some(tables) = &tables {
            let t = Instant::now();
            for _ in 0..passes() {
                for burst in keys.chunks(32) {
                    std::hint::black_box(m.run(tables, burst));
                }
            }
            worker.push(packets / t.elapsed().as_secs_f64() / 1e6);
            ratio.push(worker[worker.len() - 1] / batched[batched.len() - 1]);
        }
    }
    let worker = tables.map(|_| (median(&mut worker), median(&mut ratio)));
    (median(&mut single), median(&mut batched), worker)
}

/// A rule store holding `rules` (bulk load, verify mode), as `cfdp run`
/// would.
pub(crate) fn store_of(rules: &[AclRule]) -> RuleStore {
    let set: Vec<cfdp_rules::Rule> = rules.iter().map(AclRule::to_rule).collect();
    let cfg = StoreConfig {
        mode: Mode::Verify,
        max_rules: (rules.len() * 2).max(1 << 16),
        ..StoreConfig::default()
    };
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    RuleStore::with_rules(cfg, stats, set).expect("the set loads")
}
