//! Lookup throughput, single thread: versus the fraction of positive queries
//! (0–100 %) and versus load (50, 75, 95 %), one key at a time and batched,
//! for our filter (`cfdp`, f = 12) and the peers at the same item count:
//! `cuckoofilter` (8-bit fingerprints, rapidhash), `fastbloom` (rapidhash, same memory
//! as ours: equal bits per item), `xorf` BinaryFuse8 (rebuilt per load),
//! `hashbrown` (exact set); at 2^20 and 2^25 buckets. Key hashing is
//! included for every structure.
//!
//! Then reader scaling on our filter (2^22 buckets, 95 % load, batched,
//! 50 % positive): 1 and 2 reader threads, without and with a writer
//! applying one insert and one remove every 10 µs (≈ 200 k ops/s).
//!
//! Output: tables, `bench/results/lookup.csv`
//! (`impl,buckets_log2,load,positive_pct,batched,threads,writer,mops`),
//! `lookup_positive.png`, `lookup_load.png`.
//! Run: `cargo run --release -p cfdp-bench --bin lookup [-- --quick]`
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_bench::plot::{save_chart, Chart, Series};
use cfdp_bench::{
    fill_filter, is_quick, machine_description, median, queries, results_path, write_csv, SplitMix,
};
use cfdp_filter::hash::hash_u64;
use cfdp_filter::{Config, Filter, Lookup};
use xorf::{BinaryFuse8, Filter as _};

type Cuckoo = cuckoofilter::CuckooFilter<rapidhash::fast::RapidHasher<'static>>;

fn rate(qs: &[u64], rounds: usize, mut f: impl FnMut(&[u64]) -> usize) -> f64 {
    let mut s = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        black_box(f(qs));
        s.push(qs.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    median(&mut s)
}

fn cfdp_batched(f: &Filter, qs: &[u64]) -> usize {
    let mut hs = [0u64; 32];
    let mut out = [Lookup::Miss; 32];
    let mut hits = 0;
    for c in qs.chunks(32) {
        for (h, &k) in hs.iter_mut().zip(c) {
            *h = hash_u64(k);
        }
        f.get_batch_hashes(&hs[..c.len()], &mut out);
        hits += out[..c.len()].iter().filter(|l| l.is_hit()).count();
    }
    hits
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let sizes: &[u32] = if quick { &[16] } else { &[20, 25] };
    let loads = [0.50, 0.75, 0.95];
    let positives = [0u64, 25, 50, 75, 100];
    let nq = if quick { 1 << 18 } else { 1 << 22 };
    let rounds = if quick { 3 } else { 5 };
    println!("machine: {}", machine_description());
    let mut rows = Vec::new();
    let mut by_pos: Vec<Series> = Vec::new();
    let mut by_load: Vec<Series> = Vec::new();
    for &log2 in sizes {
        println!("\n2^{log2} buckets (median of {rounds} rounds, {nq} queries), Mops/s");
        println!(
            "{:>5} {:>5} {:>11} {:>11} {:>12} {:>10} {:>8} {:>10}",
            "load",
            "pos %",
            "cfdp",
            "cfdp-batch",
            "cuckoofilter",
            "fastbloom",
            "xorf8",
            "hashbrown"
        );
        let slots = 4usize << log2;
        let ours = Filter::new(Config {
            buckets_log2: Some(log2),
            fingerprint_bits: 12,
            ..Config::default()
        })
        .expect("config");
        let mut cuckoo = Cuckoo::with_capacity((slots as f64 * 0.95) as usize);
        let mut set: hashbrown::HashSet<u64> = hashbrown::HashSet::new();
        let mut rng = SplitMix::new(u64::from(log2));
        let mut keys: Vec<u64> = Vec::new();
        for &load in &loads {
            let target = (slots as f64 * load) as usize;
            while keys.len() < target {
                let k = rng.next();
                if ours.insert_hash(hash_u64(k), 0).is_ok() {
                    let _ = cuckoo.add(&k);
                    set.insert(k);
                    keys.push(k);
                }
            }
            // fastbloom with our memory, and xorf, built for this key set.
            // Its hasher: rapidhash, as cfdp's (its default is SipHash-1-3).
            let mut bloom = fastbloom::BloomFilter::with_num_bits(ours.stats().memory_bytes * 8)
                .hasher(rapidhash::fast::RandomState::new())
                .expected_items(keys.len());
            for k in &keys {
                bloom.insert(k);
            }
            let xor = BinaryFuse8::try_from(&keys).expect("binary fuse builds");
            for &pct in &positives {
                let qs = queries(&keys, nq, pct, 99 + pct);
                let r = [
                    (
                        "cfdp",
                        false,
                        rate(&qs, rounds, |q| {
                            q.iter()
                                .filter(|&&k| ours.contains_hash(hash_u64(k)))
                                .count()
                        }),
                    ),
                    ("cfdp", true, rate(&qs, rounds, |q| cfdp_batched(&ours, q))),
                    (
                        "cuckoofilter",
                        false,
                        rate(&qs, rounds, |q| {
                            q.iter().filter(|k| cuckoo.contains(*k)).count()
                        }),
                    ),
                    (
                        "fastbloom",
                        false,
                        rate(&qs, rounds, |q| {
                            q.iter().filter(|k| bloom.contains(*k)).count()
                        }),
                    ),
                    (
                        "xorf",
                        false,
                        rate(&qs, rounds, |q| {
                            q.iter().filter(|k| xor.contains(k)).count()
                        }),
                    ),
                    (
                        "hashbrown",
                        false,
                        rate(&qs, rounds, |q| {
                            q.iter().filter(|k| set.contains(*k)).count()
                        }),
                    ),
                ];
                println!(
                    "{load:>5.2} {pct:>5} {:>11.1} {:>11.1} {:>12.1} {:>10.1} {:>8.1} {:>10.1}",
                    r[0].2, r[1].2, r[2].2, r[3].2, r[4].2, r[5].2
                );
                for (name, batched, mops) in r {
                    rows.push(format!(
                        "{name},{log2},{load},{pct},{batched},1,false,{mops:.3}"
                    ));
                    let label = format!("{name}{} 2^{log2}", if batched { " batched" } else { "" });
                    if load == 0.95 {
                        push(&mut by_pos, &label, pct as f64, mops);
                    }
                    if pct == 50 {
                        push(&mut by_load, &label, load * 100.0, mops);
                    }
                }
            }
        }
    }

    // Reader scaling with and without a concurrent writer.
    let log2 = if quick { 16 } else { 22 };
    let f = Arc::new(
        Filter::new(Config {
            buckets_log2: Some(log2),
            fingerprint_bits: 12,
            ..Config::default()
        })
        .expect("config"),
    );
    let keys = Arc::new(fill_filter(&f, 0.95, 5));
    println!("\nreader scaling: 2^{log2} buckets, 95 % load, batched, 50 % positive (aggregate Mops/s, median of {rounds})");
    println!(
        "{:>8} {:>10} {:>10} {:>12}",
        "readers", "no writer", "writer", "writer ops/s"
    );
    let secs = if quick { 0.2 } else { 1.0 };
    for threads in [1usize, 2] {
        let mut res = [0f64; 2];
        let mut wrate = 0.0;
        for (wi, with_writer) in [false, true].into_iter().enumerate() {
            let mut samples = Vec::new();
            for _ in 0..rounds {
                let stop = Arc::new(AtomicBool::new(false));
                let ops = Arc::new(AtomicU64::new(0));
                let writer = with_writer.then(|| {
                    let (f, stop, ops) = (f.clone(), stop.clone(), ops.clone());
                    std::thread::spawn(move || {
                        // Churn keys of its own at a fixed rate; the filter stays at 95 %.
                        let mut r = SplitMix::new(77);
                        let mut mine: Vec<u64> = Vec::new();
                        while !stop.load(Ordering::Relaxed) {
                            let k = r.next();
                            if f.insert_hash(hash_u64(k), 0).is_ok() {
                                mine.push(k);
                            }
                            if mine.len() > 64 {
                                let old = mine.swap_remove(0);
                                f.remove_hash(hash_u64(old), 0);
                            }
                            ops.fetch_add(2, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_micros(10));
                        }
                        for k in mine {
                            f.remove_hash(hash_u64(k), 0);
                        }
                    })
                });
                let t0 = Instant::now();
                let handles: Vec<_> = (0..threads)
                    .map(|i| {
                        let (f, keys) = (f.clone(), keys.clone());
                        std::thread::spawn(move || {
                            let qs = queries(&keys, 1 << 16, 50, 1000 + i as u64);
                            let t = Instant::now();
                            let mut n = 0u64;
                            while t.elapsed().as_secs_f64() < secs {
                                black_box(cfdp_batched(&f, &qs));
                                n += qs.len() as u64;
                            }
                            n as f64 / t.elapsed().as_secs_f64() / 1e6
                        })
                    })
                    .collect();
                let total: f64 = handles.into_iter().map(|h| h.join().expect("reader")).sum();
                stop.store(true, Ordering::Relaxed);
                if let Some(w) = writer {
                    w.join().expect("writer");
                    wrate = ops.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
                }
                samples.push(total);
            }
            res[wi] = median(&mut samples);
            rows.push(format!(
                "cfdp,{log2},0.95,50,true,{threads},{with_writer},{:.3}",
                res[wi]
            ));
        }
        println!(
            "{threads:>8} {:>10.1} {:>10.1} {:>12.0}",
            res[0], res[1], wrate
        );
    }

    let path = results_path("lookup.csv");
    write_csv(
        &path,
        "impl,buckets_log2,load,positive_pct,batched,threads,writer,mops",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
    for (file, title, xl, series) in [
        (
            "lookup_positive.png",
            "Lookups vs positive queries (95 % load)",
            "positive queries (%)",
            by_pos,
        ),
        (
            "lookup_load.png",
            "Lookups vs load (50 % positive)",
            "load (%)",
            by_load,
        ),
    ] {
        let chart = Chart {
            title,
            x_label: xl,
            y_label: "Mops/s",
            series,
            log_y: false,
        };
        save_chart(file, &chart);
    }
}

fn push(series: &mut Vec<Series>, name: &str, x: f64, y: f64) {
    match series.iter_mut().find(|s| s.name == name) {
        Some(s) => s.points.push((x, y)),
        None => series.push(Series {
            name: name.into(),
            points: vec![(x, y)],
        }),
    }
}
