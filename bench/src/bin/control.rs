//! The control plane under load: batch latency and worker throughput under
//! rule churn, with a real rule store, a real worker thread forwarding
//! 64-byte frames from memory through the published tables, and batches
//! applied through the store's full path (validation, filter inserts,
//! publish, wait for the workers to leave the old copy).
//!
//! 1. Apply latency of 1024-insert batches into a flow filter of 2^16
//!    buckets filled to 90 / 95 / 97 % (cuckoo entries only), plain cuckoo
//!    insert path versus the Bloom-assisted path (t = 0): p50 / p99 / max
//!    of the batch wall time, and the inserts that failed. After each trial
//!    the batch is deleted and the Bloom part migrated back, so every trial
//!    starts from the same occupancy.
//! 2. Worker throughput with and without sustained churn (batches of 64
//!    inserts + 64 deletes at 10k and 100k updates/s and back to back),
//!    alternated in rounds in one run.
//!
//! Output: tables on stdout, `bench/results/control.csv` (`kind` =
//! `batch` or `churn`) and `control.png`.
//! Run: `cargo run --release -p cfdp-bench --bin control [-- --quick]`
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_bench::plot::{save_chart, Chart, Series};
use cfdp_bench::{
    bench_flow, is_quick, machine_description, median, results_path, udp_frame, write_csv, SplitMix,
};
use cfdp_control::{RuleStore, StoreConfig};
use cfdp_engine::{run_worker, Limit, LiveStats, MemoryBackend, Worker, WorkerOptions};
use cfdp_filter::BloomMode;
use cfdp_rules::{Action, Atomicity, Batch, Code, Match, Rule, Update};

const BUCKETS_LOG2: u32 = 16;

fn rule(i: u64) -> Rule {
    Rule {
        id: i as u32,
        matcher: Match::Flow(cfdp_rules::ExactFlow::of_key(bench_flow(i)).expect("a valid flow")),
        action: if i.is_multiple_of(2) {
            Action::Drop
        } else {
            Action::Allow
        },
    }
}

fn batch(updates: Vec<Update>) -> Batch {
    Batch {
        atomicity: Atomicity::ContinueOnError,
        expected_generation: None,
        updates: updates.into_iter().map(Ok).collect(),
    }
}

fn config(bloom: bool) -> StoreConfig {
    StoreConfig {
        // 2^16 buckets at 95 %.
        flow_capacity: ((1usize << BUCKETS_LOG2) as f64 * 3.8) as usize,
        bloom: bloom.then_some(BloomMode::Bit),
        threshold: 0,
        max_kicks: 500,
        auto_grow: false,
        ..StoreConfig::default()
    }
}

/// A worker thread forwarding frames through the store's tables until
/// `stop` (its packets are counted in the store's live statistics).
fn spawn_worker(
    store: &RuleStore,
    frames: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let cx = store.worker_context();
    std::thread::spawn(move || {
        let tables = cx.readers.handle();
        let mut w = Worker::new(&cx, 0, WorkerOptions::default());
        let mut backend = MemoryBackend::new(&frames, Limit::Flag(&stop));
        run_worker(&mut backend, &mut w, &tables);
        w.finish();
    })
}

fn frames_for(installed: u64, n: usize, seed: u64) -> Arc<Vec<Vec<u8>>> {
    let mut rng = SplitMix::new(seed);
    Arc::new(
        (0..n)
            .map(|_| {
                let i = if rng.next().is_multiple_of(2) {
                    rng.next() % installed
                } else {
                    (1 << 40) + rng.next() % (1 << 30)
                };
                udp_frame(&bench_flow(i))
            })
            .collect(),
    )
}

/// Fills a fresh store to `occupancy` of its cuckoo entries (inserts the
/// plain path cannot place near the top are replaced by fresh keys).
/// Returns the store and the next unused key number.
fn filled(bloom: bool, occupancy: f64) -> (RuleStore, u64) {
    let stats = Arc::new(LiveStats::new(1, 1 << 20));
    let mut store = RuleStore::new(config(bloom), stats).expect("store");
    let target = ((4u64 << BUCKETS_LOG2) as f64 * occupancy) as usize;
    let mut next = 0u64;
    while store.len() < target {
        let n = (target - store.len()).min(4096) as u64;
        let ups = (next..next + n).map(|i| Update::Insert(rule(i))).collect();
        store.apply(&batch(ups), |_, _| Ok(())).expect("fill batch");
        next += n;
        while store.migrate(1 << 16) > 0 {}
        assert!(next < 2 * target as u64, "cannot fill to {occupancy}");
    }
    (store, next)
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let trials = if quick { 5 } else { 30 };
    println!("machine: {}", machine_description());
    println!(
        "flow filter 2^{BUCKETS_LOG2} buckets, 1024-insert batches, one worker forwarding meanwhile, {trials} trials"
    );
    println!(
        "{:>6} {:>14} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "occ", "path", "p50 µs", "p99 µs", "max µs", "failed", "bloom"
    );
    let mut rows = Vec::new();
    let mut p99_series: Vec<Series> = Vec::new();
    for (path, bloom) in [("cuckoo", false), ("bloom-assisted", true)] {
        let mut pts = Vec::new();
        for occ in [0.90, 0.95, 0.97] {
            let (mut store, installed) = filled(bloom, occ);
            let stop = Arc::new(AtomicBool::new(false));
            let worker = spawn_worker(&store, frames_for(installed, 1 << 14, 7), stop.clone());
            let mut lat = Vec::new();
            let (mut failed, mut to_bloom) = (0u64, 0u64);
            let mut next = installed;
            for _ in 0..trials {
                let ids: Vec<u64> = (next..next + 1024).collect();
                next += 1024;
                let r = store
                    .apply(
                        &batch(ids.iter().map(|&i| Update::Insert(rule(i))).collect()),
                        |_, _| Ok(()),
                    )
                    .expect("batch");
                lat.push(r.wall_us as f64);
                failed += r.results.iter().filter(|r| r.code != Code::Ok).count() as u64;
                to_bloom += r.filter.bloom;
                // Back to the same state for the next trial.
                let dels: Vec<Update> = ids
                    .iter()
                    .zip(&r.results)
                    .filter(|(_, r)| r.code == Code::Ok)
                    .map(|(&i, _)| Update::Delete(i as u32))
                    .collect();
                store
                    .apply(&batch(dels), |_, _| Ok(()))
                    .expect("delete batch");
                while store.migrate(1 << 16) > 0 {}
            }
            stop.store(true, Ordering::Relaxed);
            worker.join().expect("worker");
            lat.sort_by(f64::total_cmp);
            let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
            let (p50, p99, max) = (q(0.5), q(0.99), q(1.0));
            println!(
                "{occ:>6.2} {path:>14} {p50:>10.0} {p99:>10.0} {max:>10.0} {failed:>8} {to_bloom:>8}"
            );
            rows.push(format!(
                "batch,{path},{occ},{trials},{p50:.0},{p99:.0},{max:.0},{failed},{to_bloom},,"
            ));
            pts.push((occ * 100.0, p99));
        }
        p99_series.push(Series {
            name: format!("{path} p99"),
            points: pts,
        });
    }

    // 2. Throughput with and without churn, alternating rounds.
    let rounds = if quick { 3 } else { 7 };
    let secs = if quick { 0.5 } else { 2.0 };
    let (mut store, installed) = filled(true, 0.90);
    let stop = Arc::new(AtomicBool::new(false));
    let live = Arc::clone(store.live_stats());
    let worker = spawn_worker(&store, frames_for(installed, 1 << 16, 11), stop.clone());
    let mut next = installed;
    let mut low = 0u64;
    println!(
        "\nworker throughput, 90 % full flow filter, median of {rounds} alternating rounds of {secs} s:"
    );
    // Churn in batches of 64 inserts + 64 deletes, paced to a target rate
    // of updates per second (None: back to back).
    for rate in [Some(10_000u64), Some(100_000), None] {
        let (mut quiet, mut churn) = (Vec::new(), Vec::new());
        let mut churned = 0u64;
        for _ in 0..rounds {
            for with_churn in [false, true] {
                let d0 = live.totals().packets;
                let start = Instant::now();
                let mut sent = 0u64;
                while start.elapsed().as_secs_f64() < secs {
                    let due = rate.map(|r| Duration::from_secs_f64(sent as f64 / r as f64));
                    if !with_churn || due.is_some_and(|d| d > start.elapsed()) {
                        std::thread::sleep(Duration::from_micros(500));
                        continue;
                    }
                    let mut ups: Vec<Update> =
                        (next..next + 64).map(|i| Update::Insert(rule(i))).collect();
                    ups.extend((low..low + 64).map(|i| Update::Delete(i as u32)));
                    next += 64;
                    low += 64;
                    let r = store
                        .apply(&batch(ups), |_, _| Ok(()))
                        .expect("churn batch");
                    sent += r.results.len() as u64;
                }
                let mpps =
                    (live.totals().packets - d0) as f64 / start.elapsed().as_secs_f64() / 1e6;
                churned += sent;
                if with_churn {
                    churn.push(mpps);
                } else {
                    quiet.push(mpps);
                }
            }
        }
        let (mq, mc) = (median(&mut quiet), median(&mut churn));
        let achieved = churned as f64 / (secs * rounds as f64);
        let name = rate.map_or("max".to_string(), |r| r.to_string());
        println!(
            "  churn target {name:>7} updates/s (achieved {achieved:>7.0}): no churn {mq:6.2} Mpps, churn {mc:6.2} Mpps: {:+.1} %",
            (mc / mq - 1.0) * 100.0
        );
        rows.push(format!("churn,none-vs-{name},0.90,{rounds},,,,,,{mq:.3},0"));
        rows.push(format!(
            "churn,{name},0.90,{rounds},,,,,,{mc:.3},{achieved:.0}"
        ));
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("worker");
    let path = results_path("control.csv");
    write_csv(
        &path,
        "kind,path,occupancy,trials,p50_us,p99_us,max_us,failed,to_bloom,mpps,updates_per_s",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
    save_chart(
        "control.png",
        &Chart {
            title: "1024-insert batch latency (p99) with a worker forwarding",
            x_label: "occupancy before the batch (%)",
            y_label: "batch wall time p99 (µs)",
            series: p99_series,
            log_y: true,
        },
    );
}
