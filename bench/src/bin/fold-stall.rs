//! What a fold of the exact tables costs the control path.
//!
//! The exact tables keep a bulk-loaded base both left-right copies share
//! and each copy's changes since; when the changes outgrow the base they
//! are folded into a new base (`cfdp_engine::shared`). This bench loads N
//! flow rules in bulk (the rule file or snapshot path of `cfdp run`), then
//! churns them through the rule store's full batch path — batches of 2048
//! inserts of new rules and 2048 deletes of loaded ones, so the rule set
//! keeps its size — until the changes have outgrown the base and the fold
//! has landed. Reported: every batch's wall time (p50, p99, max), the
//! batch that started the fold and, when the store reports them, the folds
//! started and landed.
//!
//! Output: a table on stdout, `bench/results/fold_stall.csv` (quick:
//! `bench/results/quick/`). `--label NAME` keeps other labels' rows (an
//! A/B writes one label per build). Run: `cargo run --release -p
//! cfdp-bench --bin fold-stall [-- --quick] [-- --rules N]`.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use cfdp_bench::{arg, bench_flow, is_quick, machine_description, results_path, write_csv};
use cfdp_control::{RuleStore, StoreConfig};
use cfdp_engine::LiveStats;
use cfdp_rules::{Action, Atomicity, Batch, Match, Rule, Update};

fn rule(i: u64) -> Rule {
    Rule {
        id: i as u32,
        matcher: Match::Flow(cfdp_rules::ExactFlow::of_key(bench_flow(i)).expect("a valid flow")),
        action: Action::Drop,
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    cfdp_bench::expect_flags(&["--label", "--rules"]);
    let quick = is_quick();
    let label = arg("--label").unwrap_or_else(|| "this".into());
    let n: u64 = arg("--rules")
        .map(|s| s.parse().expect("--rules N"))
        .unwrap_or(if quick { 200_000 } else { 2_000_000 });
    println!("machine: {}", machine_description());
    let half = 2048u64;
    // Enough batches for the changes (two per update pair: an insert and
    // a base key's tombstone) to outgrow the base, and as many again.
    let batches = (n / (2 * half) + 1) * 2;
    let cfg = StoreConfig {
        // Room for the churn without growing the filter (a rebuild is a
        // stall of its own, not the one measured here).
        flow_capacity: (n + half * batches) as usize * 9 / 8,
        max_rules: (n + half * batches) as usize,
        ..StoreConfig::default()
    };
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let t = Instant::now();
    let rules: Vec<Rule> = (0..n).map(rule).collect();
    let mut s = RuleStore::with_rules(cfg, stats, rules).expect("bulk load");
    println!("loaded {n} rules in {:.2} s", t.elapsed().as_secs_f64());

    let mut wall_ms = Vec::with_capacity(batches as usize);
    let mut freezing: Option<(u64, f64)> = None;
    for b in 0..batches {
        let ups: Vec<Update> = (0..half)
            .map(|j| Update::Insert(rule(n + b * half + j)))
            .chain((0..half).map(|j| Update::Delete((b * half + j) as u32)))
            .collect();
        let batch = Batch {
            atomicity: Atomicity::RollbackOnError,
            expected_generation: None,
            updates: ups.into_iter().map(Ok).collect(),
        };
        let before = s.folds();
        let t = Instant::now();
        let r = s.apply(&batch, |_, _| Ok(())).expect("batch");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(r.all_ok(), "churn batch {b}");
        wall_ms.push(ms);
        if s.folds().0 > before.0 && freezing.is_none() {
            freezing = Some((b, ms));
        }
    }
    // What an idle control thread does between batches: land the fold.
    s.finish_fold(true);
    let folds = s.folds();
    let (p50, p99, max) = (
        quantile(&mut wall_ms, 0.5),
        quantile(&mut wall_ms, 0.99),
        quantile(&mut wall_ms, 1.0),
    );
    println!(
        "{batches} batches of {half} inserts + {half} deletes over {n} loaded rules: \
         batch wall p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; folds started {}, \
         landed {}{}",
        folds.0,
        folds.1,
        freezing.map_or(String::new(), |(b, ms)| format!(
            "; batch {b} started the fold in {ms:.2} ms"
        ))
    );
    let mut rows = vec![
        format!("{label},{n},batches,{batches}"),
        format!("{label},{n},batch_ms_p50,{p50:.3}"),
        format!("{label},{n},batch_ms_p99,{p99:.3}"),
        format!("{label},{n},batch_ms_max,{max:.3}"),
        format!("{label},{n},folds_started,{}", folds.0),
        format!("{label},{n},folds_landed,{}", folds.1),
    ];
    if let Some((_, ms)) = freezing {
        rows.push(format!("{label},{n},freezing_batch_ms,{ms:.3}"));
    }
    let path = results_path("fold_stall.csv");
    let mut keep = cfdp_bench::rows_of_other_labels(&path, &label);
    keep.extend(rows);
    write_csv(&path, "label,rules,metric,value", &keep).expect("write csv");
    println!("wrote {}", path.display());
}
