//! The CoNEXT 2014 Table 3 experiment ("Cuckoo Filter: Practically Better Than Bloom"): fill a filter of 2^25
//! buckets with 64-bit random keys until the first insert fails, then
//! report items stored, bits per item, measured FPR (10^6 negative queries)
//! and construction rate; beside it, in the same run, the structures a user
//! would pick instead, given the same number of keys:
//!
//! * `cfdp-cf` (f = 12), `cfdp-cf-f15` (f = 15: the bits our 64-bit bucket
//!   word leaves free used for fingerprint), `cfdp-bcf` (f = 12, Bloom part,
//!   Algorithm 2 with t = 5, filled to its own first failure, which fills
//!   the Bloom part too) and `cfdp-bcf-tag` (the same with 16-bit tags);
//! * `fastbloom` with the same memory as `cfdp-cf` (equal bits per item),
//!   rapidhash as its hasher (its default is SipHash-1-3);
//! * the `cuckoofilter` crate (8-bit fingerprints, rapidhash as its hasher);
//! * `xorf` BinaryFuse8 and BinaryFuse16 (static: built once from all keys);
//! * `hashbrown` `HashSet<u64>` (exact).
//!
//! Output: table, `bench/results/table3.csv`
//! (`impl,items,bits_per_item,fpr,construct_mkeys`), `table3.png`
//! (FPR versus bits per item). `--quick`: 2^18 buckets.
//! Run: `cargo run --release -p cfdp-bench --bin table3 [-- --quick]`
#![forbid(unsafe_code)]

use std::time::Instant;

use cfdp_bench::plot::{save_chart, Chart, Series};
use cfdp_bench::{is_quick, machine_description, results_path, write_csv, SplitMix};
use cfdp_filter::hash::hash_u64;
use cfdp_filter::{BloomConfig, BloomMode, Config, Filter};
use xorf::{BinaryFuse16, BinaryFuse8, Filter as _};

struct Result {
    name: &'static str,
    items: usize,
    bits_per_item: f64,
    fpr: f64,
    mkeys: f64,
}

const NEG: usize = 1_000_000;

/// Negative queries: keys from a different generator (a collision with one
/// of the inserted 64-bit keys is vanishingly unlikely).
fn negatives() -> Vec<u64> {
    let mut r = SplitMix::new(0xdead_beef_0bad_cafe);
    (0..NEG).map(|_| r.next()).collect()
}

fn ours(
    name: &'static str,
    log2: u32,
    f_bits: u32,
    bloom: Option<BloomConfig>,
    keys: &[u64],
    neg: &[u64],
) -> (Result, usize) {
    let f = Filter::new(Config {
        buckets_log2: Some(log2),
        fingerprint_bits: f_bits,
        bloom,
        max_kicks: 500,
        ..Config::default()
    })
    .expect("config");
    let start = Instant::now();
    let mut n = 0;
    for &k in keys {
        if f.insert_hash(hash_u64(k), 0).is_err() {
            break;
        }
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let fp = neg
        .iter()
        .filter(|&&k| f.contains_hash(hash_u64(k)))
        .count();
    let s = f.stats();
    (
        Result {
            name,
            items: n,
            bits_per_item: s.bits_per_item,
            fpr: fp as f64 / neg.len() as f64,
            mkeys: n as f64 / secs / 1e6,
        },
        s.memory_bytes,
    )
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let log2 = if quick { 18 } else { 25 };
    println!("machine: {}", machine_description());
    println!("2^{log2} buckets; 64-bit random keys; FPR over {NEG} negative queries");
    let slots = 4usize << log2;
    let mut rng = SplitMix::new(7);
    // Enough keys for the fullest filter (the Bloom part adds a little room).
    let keys: Vec<u64> = (0..slots + slots / 8).map(|_| rng.next()).collect();
    let neg = negatives();
    let mut results = Vec::new();

    let (cf, cf_bytes) = ours("cfdp-cf", log2, 12, None, &keys, &neg);
    let n = cf.items;
    let keys_n = &keys[..n];
    results.push(cf);
    results.push(ours("cfdp-cf-f15", log2, 15, None, &keys, &neg).0);
    let bcf = Some(BloomConfig {
        mode: BloomMode::Bit,
        threshold: 5,
    });
    results.push(ours("cfdp-bcf", log2, 12, bcf, &keys, &neg).0);
    let tag = Some(BloomConfig {
        mode: BloomMode::Tag { bits: 16 },
        threshold: 5,
    });
    results.push(ours("cfdp-bcf-tag", log2, 12, tag, &keys, &neg).0);

    // fastbloom with the same memory as cfdp-cf, for the same n keys.
    {
        let bits = cf_bytes * 8;
        let start = Instant::now();
        // Its hasher: rapidhash, as cfdp's (its default is SipHash-1-3).
        let mut b = fastbloom::BloomFilter::with_num_bits(bits)
            .hasher(rapidhash::fast::RandomState::new())
            .expected_items(n);
        for k in keys_n {
            b.insert(k);
        }
        let secs = start.elapsed().as_secs_f64();
        let fp = neg.iter().filter(|k| b.contains(*k)).count();
        results.push(Result {
            name: "fastbloom",
            items: n,
            bits_per_item: b.num_bits() as f64 / n as f64,
            fpr: fp as f64 / NEG as f64,
            mkeys: n as f64 / secs / 1e6,
        });
    }
    // The cuckoofilter crate, rapidhash as its hasher.
    {
        type H = rapidhash::fast::RapidHasher<'static>;
        let start = Instant::now();
        let mut c = cuckoofilter::CuckooFilter::<H>::with_capacity(n);
        let mut stored = 0;
        for k in keys_n {
            if c.add(k).is_err() {
                break;
            }
            stored += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let fp = neg.iter().filter(|k| c.contains(*k)).count();
        results.push(Result {
            name: "cuckoofilter",
            items: stored,
            bits_per_item: c.memory_usage() as f64 * 8.0 / stored as f64,
            fpr: fp as f64 / NEG as f64,
            mkeys: stored as f64 / secs / 1e6,
        });
    }
    // xorf binary fuse filters: static, built from all keys at once.
    {
        let start = Instant::now();
        let x = BinaryFuse8::try_from(keys_n).expect("binary fuse 8 builds");
        let secs = start.elapsed().as_secs_f64();
        let fp = neg.iter().filter(|k| x.contains(k)).count();
        results.push(Result {
            name: "xorf-bfuse8",
            items: n,
            bits_per_item: x.fingerprints.len() as f64 * 8.0 / n as f64,
            fpr: fp as f64 / NEG as f64,
            mkeys: n as f64 / secs / 1e6,
        });
        drop(x);
        let start = Instant::now();
        let x = BinaryFuse16::try_from(keys_n).expect("binary fuse 16 builds");
        let secs = start.elapsed().as_secs_f64();
        let fp = neg.iter().filter(|k| x.contains(k)).count();
        results.push(Result {
            name: "xorf-bfuse16",
            items: n,
            bits_per_item: x.fingerprints.len() as f64 * 16.0 / n as f64,
            fpr: fp as f64 / NEG as f64,
            mkeys: n as f64 / secs / 1e6,
        });
    }
    // hashbrown: exact set.
    {
        let start = Instant::now();
        let mut s: hashbrown::HashSet<u64> = hashbrown::HashSet::with_capacity(n);
        for &k in keys_n {
            s.insert(k);
        }
        let secs = start.elapsed().as_secs_f64();
        let fp = neg.iter().filter(|k| s.contains(*k)).count();
        // Buckets of 8 bytes plus one control byte each.
        let bytes = s.capacity().next_power_of_two() * 9;
        results.push(Result {
            name: "hashbrown",
            items: n,
            bits_per_item: bytes as f64 * 8.0 / n as f64,
            fpr: fp as f64 / NEG as f64,
            mkeys: n as f64 / secs / 1e6,
        });
    }

    println!(
        "{:<14} {:>12} {:>10} {:>10} {:>12}",
        "impl", "items", "bits/item", "fpr %", "build Mkeys/s"
    );
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for r in &results {
        println!(
            "{:<14} {:>12} {:>10.2} {:>10.4} {:>12.2}",
            r.name,
            r.items,
            r.bits_per_item,
            r.fpr * 100.0,
            r.mkeys
        );
        rows.push(format!(
            "{},{},{:.3},{:.7},{:.3}",
            r.name, r.items, r.bits_per_item, r.fpr, r.mkeys
        ));
        if r.fpr > 0.0 {
            series.push(Series {
                name: r.name.into(),
                points: vec![(r.bits_per_item, r.fpr)],
            });
        }
    }
    let path = results_path("table3.csv");
    write_csv(&path, "impl,items,bits_per_item,fpr,construct_mkeys", &rows).expect("write csv");
    println!("wrote {}", path.display());
    let chart = Chart {
        title: "False-positive rate versus bits per item",
        x_label: "bits per item",
        y_label: "FPR",
        series,
        log_y: true,
    };
    save_chart("table3.png", &chart);
}
