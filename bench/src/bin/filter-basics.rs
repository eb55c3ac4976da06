//! The filter's basic figures, single thread:
//! * bits per item and measured FPR at 95 % load for f = 8, 12, 16
//!   (10^6 negative queries), beside the model and the bound;
//! * insert throughput from empty to 95 % (plain cuckoo path), one writer:
//!   `Filter::insert_hash` (takes the writers' mutex per call) and through
//!   one `FilterWriter` handle (as a batch does), key hashing included;
//! * the bulk build `Filter::build` of the same keys (all cores; keys
//!   hashed before the clock starts, as a rule file's are; median of 5);
//! * lookup throughput, one key at a time and batched (groups of 32 keys
//!   through `get_batch_hashes`), at 2^20, 2^22 and 2^25 buckets, 50 %
//!   positive queries, key hashing included in both.
//!
//! Output: tables on stdout, `bench/results/filter_basics.csv`.
//! Run: `cargo run --release -p cfdp-bench --bin filter-basics [-- --quick]`
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::Instant;

use cfdp_bench::{machine_description, median, queries, results_path, write_csv, SplitMix};
use cfdp_filter::hash::hash_u64;
use cfdp_filter::{Config, Filter, Lookup};

struct Filled {
    filter: Filter,
    keys: Vec<u64>,
    /// Through one writer handle.
    insert_mops: f64,
}

fn fill(log2: u32, f_bits: u32, load: f64, seed: u64) -> Filled {
    fill_with(
        Config {
            buckets_log2: Some(log2),
            fingerprint_bits: f_bits,
            ..Config::default()
        },
        load,
        seed,
    )
}

fn fill_with(config: Config, load: f64, seed: u64) -> Filled {
    let (log2, f_bits) = (config.buckets_log2.unwrap_or(0), config.fingerprint_bits);
    let filter = Filter::new(config).expect("config");
    let target = (filter.slots() as f64 * load) as usize;
    let mut rng = SplitMix::new(seed);
    let keys: Vec<u64> = (0..target).map(|_| rng.next()).collect();
    let start = Instant::now();
    let mut inserted = 0;
    let mut w = filter.writer();
    for &k in &keys {
        if w.insert_hash(hash_u64(k), 0).is_err() {
            eprintln!(
                "note: 2^{log2} buckets, f={f_bits}: first failed insert at load {:.4}",
                filter.stats().load_factor
            );
            break;
        }
        inserted += 1;
    }
    let insert_mops = inserted as f64 / start.elapsed().as_secs_f64() / 1e6;
    drop(w);
    let mut keys = keys;
    keys.truncate(inserted);
    Filled {
        filter,
        keys,
        insert_mops,
    }
}

/// Inserts `keys` one `insert_hash` call at a time into a fresh filter of
/// the same size: M inserts/s.
fn per_call_insert_mops(log2: u32, keys: &[u64]) -> f64 {
    let f = Filter::new(Config {
        buckets_log2: Some(log2),
        fingerprint_bits: 12,
        ..Config::default()
    })
    .expect("config");
    let start = Instant::now();
    for &k in keys {
        f.insert_hash(hash_u64(k), 0)
            .expect("room: the same keys fitted");
    }
    keys.len() as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// Bulk-builds a filter of `keys` (hashed beforehand): M keys/s.
/// The bulk build of `keys` into a fresh filter of the same size, median
/// of `rounds` builds (one build swings by 1.5x on a shared VM): M keys/s.
fn build_mops(log2: u32, keys: &[u64], rounds: usize) -> f64 {
    let items: Vec<(u64, u32)> = keys.iter().map(|&k| (hash_u64(k), 0)).collect();
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let cfg = Config {
                buckets_log2: Some(log2),
                fingerprint_bits: 12,
                ..Config::default()
            };
            let start = Instant::now();
            let f = Filter::build(cfg, &items, 0).expect("build");
            let mops = items.len() as f64 / start.elapsed().as_secs_f64() / 1e6;
            assert_eq!(f.len(), items.len());
            mops
        })
        .collect();
    median(&mut samples)
}

fn lookup_mops(f: &Filter, qs: &[u64], batched: bool, rounds: usize) -> f64 {
    let mut samples = Vec::new();
    let mut hashes = [0u64; 32];
    let mut out = [Lookup::Miss; 32];
    for _ in 0..rounds {
        let start = Instant::now();
        let mut hits = 0usize;
        if batched {
            for chunk in qs.chunks(32) {
                for (h, &k) in hashes.iter_mut().zip(chunk) {
                    *h = hash_u64(k);
                }
                f.get_batch_hashes(&hashes[..chunk.len()], &mut out);
                hits += out[..chunk.len()].iter().filter(|l| l.is_hit()).count();
            }
        } else {
            // No `black_box` on the keys (until 2026-11-24 there was one: a
            // store and a load a lookup): they come from a slice, nothing can
            // be folded away, and the paper authors' loop has none either.
            for &k in qs {
                hits += usize::from(f.contains_hash(hash_u64(k)));
            }
        }
        black_box(hits);
        samples.push(qs.len() as f64 / start.elapsed().as_secs_f64() / 1e6);
    }
    median(&mut samples)
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--sizes"]);
    let quick = cfdp_bench::is_quick();
    let mut rows = Vec::new();
    println!("machine: {}", machine_description());

    // 1. Space and accuracy at 95 % load.
    let space_log2 = if quick { 16 } else { 20 };
    println!("\nf, bits/item, FPR at 95 % load (2^{space_log2} buckets, 10^6 negative queries)");
    println!(
        "{:>3} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "f", "bits/item", "fpr", "model", "bound", "insert Mops"
    );
    for f_bits in [8, 12, 16] {
        let filled = fill(space_log2, f_bits, 0.95, u64::from(f_bits));
        let f = &filled.filter;
        let mut neg = SplitMix::new(0xabcd + u64::from(f_bits));
        let n = 1_000_000;
        let fp = (0..n).filter(|_| f.contains_hash(neg.next())).count();
        let fpr = fp as f64 / n as f64;
        let s = f.stats();
        println!(
            "{f_bits:>3} {:>10.2} {fpr:>12.6} {:>12.6} {:>12.6} {:>12.2}",
            s.bits_per_item, s.estimated_fpr, s.fpr_bound, filled.insert_mops
        );
        rows.push(format!(
            "space,{f_bits},{space_log2},{:.4},,,{:.3},{fpr:.7},{:.3},,",
            s.load_factor, s.bits_per_item, filled.insert_mops
        ));
    }

    // 2. Lookup throughput, single versus batched.
    let sizes: Vec<u32> = match std::env::args().skip_while(|a| a != "--sizes").nth(1) {
        Some(list) => list
            .split(',')
            .map(|x| {
                x.parse()
                    .expect("--sizes: comma-separated log2 bucket counts")
            })
            .collect(),
        None if quick => vec![16, 20],
        None => vec![20, 22, 25],
    };
    let rounds = if quick { 3 } else { 7 };
    println!("\nf = 12, 95 % load; lookups 50 % positive, hashing included (median of {rounds})");
    println!(
        "{:>8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12}",
        "buckets", "ins/call", "ins/writer", "build", "single", "batched", "batch/single"
    );
    for &log2 in &sizes {
        {
            let filled = fill(log2, 12, 0.95, 7 + u64::from(log2));
            let qs = queries(&filled.keys, if quick { 1 << 20 } else { 1 << 23 }, 50, 99);
            let single = lookup_mops(&filled.filter, &qs, false, rounds);
            let batch = lookup_mops(&filled.filter, &qs, true, rounds);
            let per_call = per_call_insert_mops(log2, &filled.keys);
            let build = build_mops(log2, &filled.keys, if quick { 1 } else { 5 });
            println!(
                "{:>8} {per_call:>11.2} {:>11.2} {build:>11.2} {single:>11.1} {batch:>11.1} {:>12.2}",
                format!("2^{log2}"),
                filled.insert_mops,
                batch / single
            );
            let s = filled.filter.stats();
            rows.push(format!(
                "lookup,12,{log2},{:.4},{single:.2},{batch:.2},{:.3},,{:.3},{per_call:.3},{build:.3}",
                s.load_factor, s.bits_per_item, filled.insert_mops
            ));
        }
    }
    // 3. The two layouts side by side, as the data plane runs them (f = 12
    //    with a 1-bit Bloom field): memory against lookup rate.
    let log2 = if quick { 20 } else { 22 };
    println!(
        "\nlayouts at 2^{log2} buckets, f = 12 + 1-bit Bloom field, 95 % load (median of {rounds})"
    );
    println!(
        "{:>8} {:>10} {:>11} {:>11} {:>11}",
        "layout", "bits/item", "ins/writer", "single", "batched"
    );
    for packed in [false, true] {
        let filled = fill_with(
            Config {
                buckets_log2: Some(log2),
                fingerprint_bits: 12,
                bloom: Some(cfdp_filter::BloomConfig {
                    mode: cfdp_filter::BloomMode::Bit,
                    threshold: 4,
                }),
                packed,
                ..Config::default()
            },
            0.95,
            31,
        );
        let qs = queries(&filled.keys, if quick { 1 << 20 } else { 1 << 23 }, 50, 98);
        let single = lookup_mops(&filled.filter, &qs, false, rounds);
        let batch = lookup_mops(&filled.filter, &qs, true, rounds);
        let s = filled.filter.stats();
        let name = if packed { "packed" } else { "word" };
        println!(
            "{name:>8} {:>10.2} {:>11.2} {single:>11.1} {batch:>11.1}",
            s.bits_per_item, filled.insert_mops
        );
        rows.push(format!(
            "layout-{name},12,{log2},{:.4},{single:.2},{batch:.2},{:.3},,{:.3},,",
            s.load_factor, s.bits_per_item, filled.insert_mops
        ));
    }

    let path = results_path("filter_basics.csv");
    write_csv(
        &path,
        "experiment,fp_bits,buckets_log2,load,single_mops,batched_mops,bits_per_item,fpr,insert_mops,insert_per_call_mops,build_mops",
        &rows,
    )
    .expect("write csv");
    println!("\nwrote {}", path.display());
}
