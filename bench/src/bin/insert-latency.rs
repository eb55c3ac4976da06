//! Per-insert latency while a filter fills from 90 % to 97 % load: the plain
//! cuckoo path versus the Bloom-assisted path (Algorithm 2, bit mode, t = 0
//! and t = 5), one hdrhistogram per load band. The band is the occupancy of
//! the cuckoo entries (entries in use / slots), the same for every variant:
//! items in the Bloom part do not count (counting them would put a Bloom
//! variant's "97 %" at a much emptier cuckoo table). Each band also reports
//! how many items the Bloom part held and the false-positive rate measured
//! when the band was left (10^5 keys never inserted), since the Bloom part
//! is what the faster inserts cost.
//!
//! Each variant starts from the same 90 % fill (plain inserts, same keys),
//! then inserts the same sequence of new keys, timing each call. A plain
//! insert that finds no room within 1000 iterations fails (counted; its
//! time is recorded too: that is what a failed insert costs).
//!
//! Output: table, `bench/results/insert_latency.csv`
//! (`filter,band,inserts,failures,mean_ns,p50_ns,p99_ns,p999_ns,max_ns,bloom_items,fpr`),
//! `insert_latency_p99.png`, `insert_latency_mean.png`.
//! Run: `cargo run --release -p cfdp-bench --bin insert-latency [-- --quick]`
#![forbid(unsafe_code)]

use std::time::Instant;

use cfdp_bench::plot::{save_chart, Chart, Series};
use cfdp_bench::{is_quick, machine_description, results_path, write_csv, SplitMix};
use cfdp_filter::{BloomConfig, BloomMode, Config, Filter};
use hdrhistogram::Histogram;

const BANDS: [(f64, f64); 4] = [(0.90, 0.93), (0.93, 0.95), (0.95, 0.96), (0.96, 0.97)];

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let log2 = if quick { 16 } else { 20 };
    println!("machine: {}", machine_description());
    println!("2^{log2} buckets, f = 12, max_iter = 1000; latency per insert call (ns)");
    let variants: [(&str, Option<u32>); 3] = [
        ("cuckoo", None),
        ("bloom-t0", Some(0)),
        ("bloom-t5", Some(5)),
    ];
    let mut rows = Vec::new();
    let mut p99: Vec<Series> = Vec::new();
    let mut mean: Vec<Series> = Vec::new();
    println!(
        "{:<10} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>9}",
        "path", "band", "inserts", "fails", "mean", "p50", "p99", "p99.9", "max", "bloom", "fpr"
    );
    for (name, t) in variants {
        let f = Filter::new(Config {
            buckets_log2: Some(log2),
            fingerprint_bits: 12,
            bloom: Some(BloomConfig {
                mode: BloomMode::Bit,
                threshold: t.unwrap_or(0),
            }),
            max_kicks: 1000,
            ..Config::default()
        })
        .expect("config");
        let slots = f.slots() as f64;
        let mut rng = SplitMix::new(42);
        while (f.len() as f64) < 0.90 * slots {
            let _ = f.insert_hash_with(rng.next(), 0, None);
        }
        let mut hists: Vec<Histogram<u64>> = BANDS
            .iter()
            .map(|_| Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("bounds"))
            .collect();
        let mut fails = [0u64; BANDS.len()];
        // (Bloom items, FPR) when each band was left.
        let mut at_end = [(0usize, f64::NAN); BANDS.len()];
        let fpr = |f: &Filter| {
            let mut neg = SplitMix::new(777);
            let n = 100_000;
            (0..n).filter(|_| f.contains_hash(neg.next())).count() as f64 / n as f64
        };
        let mut keys = SplitMix::new(4242);
        let mut attempts = 0u64;
        let mut current: Option<usize> = None;
        loop {
            // Cuckoo-entry occupancy: Bloom-part items excluded.
            let load = (f.len() - f.bloom_len()) as f64 / slots;
            let band = BANDS.iter().position(|&(lo, hi)| load >= lo && load < hi);
            if band != current {
                if let Some(b) = current {
                    at_end[b] = (f.bloom_len(), fpr(&f));
                }
                current = band;
            }
            let Some(band) = band else {
                break;
            };
            attempts += 1;
            if attempts > 8 * slots as u64 {
                at_end[band] = (f.bloom_len(), fpr(&f));
                break; // this path cannot get further
            }
            let h = keys.next();
            let start = Instant::now();
            let ok = f.insert_hash_with(h, 0, t).is_ok();
            let ns = start.elapsed().as_nanos() as u64;
            hists[band].saturating_record(ns.max(1));
            if !ok {
                fails[band] += 1;
            }
        }
        let mut p99s = Vec::new();
        let mut means = Vec::new();
        for (i, (lo, hi)) in BANDS.iter().enumerate() {
            let hgram = &hists[i];
            if hgram.is_empty() {
                println!("{name:<10} {lo:.2}-{hi:.2} {:>9}   (not reached)", 0);
                continue;
            }
            let (m, p50, p99v, p999, max) = (
                hgram.mean(),
                hgram.value_at_quantile(0.5),
                hgram.value_at_quantile(0.99),
                hgram.value_at_quantile(0.999),
                hgram.max(),
            );
            let (bloom, fp) = at_end[i];
            println!(
                "{name:<10} {lo:.2}-{hi:.2} {:>9} {:>8} {m:>8.0} {p50:>8} {p99v:>8} {p999:>9} {max:>9} {bloom:>8} {:>8.4}%",
                hgram.len(),
                fails[i],
                fp * 100.0
            );
            rows.push(format!(
                "{name},{lo:.2}-{hi:.2},{},{},{m:.1},{p50},{p99v},{p999},{max},{bloom},{fp:.6}",
                hgram.len(),
                fails[i]
            ));
            let x = (lo + hi) / 2.0 * 100.0;
            p99s.push((x, p99v as f64));
            means.push((x, m));
        }
        p99.push(Series {
            name: name.into(),
            points: p99s,
        });
        mean.push(Series {
            name: name.into(),
            points: means,
        });
    }
    let path = results_path("insert_latency.csv");
    write_csv(
        &path,
        "filter,band,inserts,failures,mean_ns,p50_ns,p99_ns,p999_ns,max_ns,bloom_items,fpr",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
    for (file, title, series) in [
        (
            "insert_latency_p99.png",
            "p99 insert latency by load band",
            p99,
        ),
        (
            "insert_latency_mean.png",
            "Mean insert latency by load band",
            mean,
        ),
    ] {
        let chart = Chart {
            title,
            x_label: "cuckoo-entry occupancy (% of slots, band midpoint)",
            y_label: "ns",
            series,
            log_y: true,
        };
        save_chart(file, &chart);
    }
}
