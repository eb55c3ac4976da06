//! The data plane's per-worker rate, replaying 64-byte frames from memory.
//!
//! For 1,000 / 100,000 / 1,000,000 installed exact-flow rules and 1 % / 50 %
//! of packets matching a rule, one worker runs the engine's worker loop —
//! `cfdp_engine::run_worker`, the loop every backend runs (decode, fragment
//! table, one hash per packet, matching, actions, counters published per
//! burst; flow accounting off, as in `cfdp run`) — over a preloaded pool of
//! frames (`MemoryBackend`), in the three matcher
//! modes side by side in one run: `filter` (verify mode: filter first,
//! positives confirmed in the exact table), `filter-only`, and `exact` (no
//! filter: every packet probes the hashbrown exact table). Median of rounds.
//!
//! Output: table on stdout, `bench/results/pipeline.csv` with header
//! `backend,impl,rules,match_pct,workers,mpps` (`backend` = `memory`).
//! Run: `cargo run --release -p cfdp-bench --bin pipeline [-- --quick]`
#![forbid(unsafe_code)]

use std::time::Instant;

use cfdp_bench::{
    arg_u64_list, bench_flow, is_quick, machine_description, median, results_path,
    side_results_path, udp_frame, write_csv, SplitMix,
};
use cfdp_control::RuleStore;
use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
use cfdp_rules::{Action, Match, Rule};

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--passes", "--rules"]);
    let quick = is_quick();
    // `--rules 1000,10000000`: the rule-set sizes to measure.
    let rule_counts: Vec<u64> = match arg_u64_list("--rules") {
        Some(r) => r,
        None if quick => vec![1_000, 100_000],
        None => vec![1_000, 100_000, 1_000_000, 10_000_000],
    };
    // `--passes N`: a fixed amount of work (N passes over the frames per
    // round) instead of a fixed time — for instruction counts under
    // callgrind, which are only comparable for the same work. Its results
    // go to results/quick/ (a time-limited run's CSV is not overwritten).
    let passes: Option<u64> = arg_u64_list("--passes").and_then(|v| v.first().copied());
    let pool_size = if quick || passes.is_some() {
        1 << 16
    } else {
        1 << 20
    };
    let rounds = if quick {
        3
    } else if passes.is_some() {
        1
    } else {
        5
    };
    let secs_per_round = if quick { 0.2 } else { 0.6 };
    let limit = || match passes {
        Some(p) => Limit::Passes(p),
        None => Limit::Seconds(secs_per_round),
    };
    println!("machine: {}", machine_description());
    println!("one worker, 64-byte frames from memory, median of {rounds} rounds");
    println!(
        "{:>9} {:>7} {:>12} {:>12} {:>12} {:>14}",
        "rules", "match %", "filter Mpps", "f-only Mpps", "exact Mpps", "filter/exact"
    );
    let mut rows = Vec::new();
    for &n in &rule_counts {
        let rules: Vec<Rule> = (0..n)
            .map(|i| Rule {
                id: i as u32,
                matcher: Match::Flow(
                    cfdp_rules::ExactFlow::of_key(bench_flow(i)).expect("a valid flow"),
                ),
                action: if i % 2 == 0 {
                    Action::Drop
                } else {
                    Action::Allow
                },
            })
            .collect();
        let matchers: Vec<_> = [
            ("filter", Mode::Verify),
            ("filter-only", Mode::FilterOnly),
            ("exact", Mode::Exact),
        ]
        .into_iter()
        // Filter-only entries hold fingerprint + slot in 31 bits: above
        // 2^23 rules the fingerprint would be under 8 bits and cfdp refuses
        // the configuration.
        .filter(|(_, mode)| *mode != Mode::FilterOnly || n <= 1 << 23)
        .map(|(name, mode)| {
            (
                name,
                RuleStore::fixed(&rules[..], mode, 1).expect("rules load"),
            )
        })
        .collect();
        drop(rules);
        for match_pct in [1u64, 50] {
            let mut rng = SplitMix::new(n ^ match_pct);
            let frames: Vec<Vec<u8>> = (0..pool_size)
                .map(|_| {
                    let k = if rng.next() % 100 < match_pct {
                        bench_flow(rng.next() % n)
                    } else {
                        bench_flow(n + rng.next() % (1 << 30)) // never a rule
                    };
                    udp_frame(&k)
                })
                .collect();
            let mut mpps = [f64::NAN; 3];
            let mut samples: Vec<Vec<f64>> = vec![Vec::new(); matchers.len()];
            for _ in 0..rounds {
                for (mi, (_, (_store, cx))) in matchers.iter().enumerate() {
                    let mut w = Worker::new(cx, 0, WorkerOptions::default());
                    let tables = cx.readers.handle();
                    let mut backend = MemoryBackend::new(&frames, limit());
                    let start = Instant::now();
                    let done = run_worker(&mut backend, &mut w, &tables).packets;
                    samples[mi].push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
                }
            }
            // Columns by name: filter-only may be missing.
            let col = |name: &str| match name {
                "filter" => 0,
                "filter-only" => 1,
                _ => 2,
            };
            for (i, s) in samples.iter_mut().enumerate() {
                mpps[col(matchers[i].0)] = median(s);
            }
            println!(
                "{n:>9} {match_pct:>7} {:>12.2} {:>12.2} {:>12.2} {:>14.2}",
                mpps[0],
                mpps[1],
                mpps[2],
                mpps[0] / mpps[2]
            );
            for (name, _) in &matchers {
                rows.push(format!(
                    "memory,{name},{n},{match_pct},1,{:.3}",
                    mpps[col(name)]
                ));
            }
        }
    }
    let path = if passes.is_some() && !quick {
        side_results_path("pipeline-passes.csv")
    } else {
        results_path("pipeline.csv")
    };
    write_csv(&path, "backend,impl,rules,match_pct,workers,mpps", &rows).expect("write csv");
    println!("wrote {}", path.display());
}
