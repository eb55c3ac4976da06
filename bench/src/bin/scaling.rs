//! Multi-core scaling: how the read side grows with cores, with and without
//! a writer changing rules at full speed.
//!
//! Two parts, each for every reader count in `--threads` (default 1,2):
//!
//! * `filter`: the cuckoo filter alone — 2^22 buckets at 95 % load, f = 12,
//!   batched lookups (bursts of 32, hashing included), 50 % positive; the
//!   writer inserts and removes keys of its own back to back (the filter
//!   stays at 95 %).
//! * `acl` (with `--rules FILE --trace FILE`, a ClassBench set): the rule
//!   store as `cfdp run` holds it (verify mode), each reader a worker
//!   calling `match_burst` over the published tables a burst of 32 at a time
//!   (entering the tables per burst, as `run_worker` does); the writer
//!   deletes one rule of the set and inserts it back, one batch each, with
//!   publication (`settle` waits until no reader holds the old tables), no
//!   journal.
//!
//! The writer runs without pauses, so its rate is the most the control path
//! sustains beside that many readers. Threads are not pinned.
//!
//! Output: a table and `bench/results/scaling.csv`
//! (`part,threads,writer,mops,mops_per_thread,writer_ops_per_s`; `--csv
//! PATH` elsewhere), headed by the run line. `bench/scaling.sh` adds
//! `cfdp replay` with 1..N workers. `--secs S` per measurement (default 1), `--rounds N`
//! (default 3, medians).
//!
//! Run: `cargo run --release -p cfdp-bench --bin scaling -- --threads 1,2,4,8
//! [--rules acl1_10k --trace acl1_10k_trace]`
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use cfdp_bench::{
    arg, arg_u64_list, fill_filter, is_quick, load_classbench, median, queries, results_path,
    write_csv, BurstMatcher, SplitMix,
};
use cfdp_control::{RuleStore, StoreConfig};
use cfdp_engine::{LiveStats, Mode};
use cfdp_filter::hash::hash_u64;
use cfdp_filter::{Config, Filter, Lookup};
use cfdp_rules::{AclRule, Atomicity, Batch, Rule, Update};

/// One measurement: aggregate reader rate (M per second) and writer ops per second.
struct Point {
    mops: f64,
    writer_ops: f64,
}

/// Runs `readers` threads of `read` (each returns how many items it did in
/// `secs`) while `write` runs on this thread until they are done (if
/// `with_writer`); returns the aggregate rate and the writer's rate.
fn measure<R, W>(readers: usize, secs: f64, with_writer: bool, read: R, mut write: W) -> Point
where
    R: Fn(usize, &AtomicBool) -> u64 + Sync,
    W: FnMut() -> u64,
{
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let t0 = Instant::now();
        let handles: Vec<_> = (0..readers)
            .map(|i| {
                let (read, stop) = (&read, &stop);
                s.spawn(move || read(i, stop))
            })
            .collect();
        let mut ops = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            if with_writer {
                ops += write();
            } else {
                thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let items: u64 = handles.into_iter().map(|h| h.join().expect("reader")).sum();
        let el = t0.elapsed().as_secs_f64();
        Point {
            mops: items as f64 / el / 1e6,
            writer_ops: ops as f64 / el,
        }
    })
}

fn filter_part(threads: &[usize], secs: f64, rounds: usize, rows: &mut Vec<String>) {
    let log2 = if is_quick() { 18 } else { 22 };
    let f = Filter::new(Config {
        buckets_log2: Some(log2),
        fingerprint_bits: 12,
        ..Config::default()
    })
    .expect("config");
    let keys = fill_filter(&f, 0.95, 5);
    let qs: Vec<Vec<u64>> = (0..threads.iter().copied().max().unwrap_or(1))
        .map(|i| queries(&keys, 1 << 16, 50, 1000 + i as u64))
        .collect();
    let read = |i: usize, stop: &AtomicBool| {
        let mut hs = [0u64; 32];
        let mut out = [Lookup::Miss; 32];
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for c in qs[i].chunks(32) {
                for (h, &k) in hs.iter_mut().zip(c) {
                    *h = hash_u64(k);
                }
                f.get_batch_hashes(&hs[..c.len()], &mut out);
                black_box(&out);
            }
            n += qs[i].len() as u64;
        }
        n
    };
    let mut wr = SplitMix::new(77);
    let mut mine: Vec<u64> = Vec::new();
    let mut write = || {
        let k = wr.next();
        if f.insert_hash(hash_u64(k), 0).is_ok() {
            mine.push(k);
        }
        if mine.len() > 64 {
            let old = mine.swap_remove(0);
            f.remove_hash(hash_u64(old), 0);
        }
        2
    };
    run_part("filter", threads, secs, rounds, rows, read, &mut write);
}

fn acl_part(
    rules_path: &str,
    trace_path: &str,
    threads: &[usize],
    secs: f64,
    rounds: usize,
    rows: &mut Vec<String>,
) {
    let (imported, keys) = load_classbench("scaling", rules_path, trace_path);
    let set: Vec<Rule> = imported.rules.iter().map(AclRule::to_rule).collect();
    let cfg = StoreConfig {
        mode: Mode::Verify,
        max_rules: (set.len() * 2).max(1 << 16),
        ..StoreConfig::default()
    };
    let workers = threads.iter().copied().max().unwrap_or(1);
    let stats = Arc::new(LiveStats::new(workers, cfg.max_rules));
    let mut store = RuleStore::with_rules(cfg, stats, set.clone()).expect("the set loads");
    let factory = store.readers();
    let read = |_: usize, stop: &AtomicBool| {
        let handle = factory.handle();
        let mut m = BurstMatcher::default();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for burst in keys.chunks(32) {
                let Some(t) = handle.enter() else { return n };
                black_box(m.run(&t, burst));
            }
            n += keys.len() as u64;
        }
        n
    };
    let one = |u: Update| Batch {
        atomicity: Atomicity::RollbackOnError,
        expected_generation: None,
        updates: vec![Ok(u)],
    };
    let mut next = 0usize;
    let mut write = || {
        let r = set[next % set.len()];
        next += 1;
        for u in [Update::Delete(r.id), Update::Insert(r)] {
            let rep = store.apply(&one(u), |_, _| Ok(())).expect("applies");
            assert!(rep.applied, "rule {} updates", r.id);
            store.settle();
        }
        2
    };
    run_part("acl", threads, secs, rounds, rows, read, &mut write);
}

fn run_part<R, W>(
    part: &str,
    threads: &[usize],
    secs: f64,
    rounds: usize,
    rows: &mut Vec<String>,
    read: R,
    write: &mut W,
) where
    R: Fn(usize, &AtomicBool) -> u64 + Sync,
    W: FnMut() -> u64,
{
    println!("\n{part}: aggregate M/s, median of {rounds} ({secs} s each)");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>14}",
        "threads", "no writer", "per thread", "writer", "writer ops/s"
    );
    for &t in threads {
        let mut cols = Vec::new();
        for with_writer in [false, true] {
            let mut m = Vec::new();
            let mut w = Vec::new();
            for _ in 0..rounds {
                let p = measure(t, secs, with_writer, &read, &mut *write);
                m.push(p.mops);
                w.push(p.writer_ops);
            }
            let (mops, wops) = (median(&mut m), median(&mut w));
            rows.push(format!(
                "{part},{t},{with_writer},{mops:.3},{:.3},{wops:.0}",
                mops / t as f64
            ));
            cols.push((mops, wops));
        }
        println!(
            "{t:>8} {:>10.1} {:>10.1} {:>10.1} {:>14.0}",
            cols[0].0,
            cols[0].0 / t as f64,
            cols[1].0,
            cols[1].1
        );
    }
}

fn main() {
    cfdp_bench::expect_flags(&[
        "--csv",
        "--rounds",
        "--rules",
        "--secs",
        "--threads",
        "--trace",
    ]);
    let threads: Vec<usize> = arg_u64_list("--threads")
        .unwrap_or_else(|| vec![1, 2])
        .into_iter()
        .map(|t| usize::try_from(t).unwrap_or(1).max(1))
        .collect();
    let secs: f64 = arg("--secs")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if is_quick() { 0.1 } else { 1.0 });
    let rounds: usize = arg("--rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(if is_quick() { 1 } else { 3 })
        .max(1);
    println!("{}", cfdp_bench::run_header());
    let mut rows = Vec::new();
    filter_part(&threads, secs, rounds, &mut rows);
    match (arg("--rules"), arg("--trace")) {
        (Some(r), Some(t)) => acl_part(&r, &t, &threads, secs, rounds, &mut rows),
        (None, None) => println!("\nacl: skipped (no --rules/--trace)"),
        _ => {
            eprintln!("scaling: --rules and --trace go together");
            std::process::exit(2)
        }
    }
    let path = arg("--csv").map_or_else(|| results_path("scaling.csv"), PathBuf::from);
    write_csv(
        &path,
        "part,threads,writer,mops,mops_per_thread,writer_ops_per_s",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
}
