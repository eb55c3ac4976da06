//! The Bloom-Cuckoo paper's experiments, for the plain cuckoo filter (`cf`), the
//! paper's Bloom-Cuckoo filter (`bcf`, one bit per bucket) and our tag mode
//! (`bcf-tag`, a 16-bit tag per bucket in the spare bits of the bucket word).
//!
//! Setup as in the paper: m = 32768 buckets, f = 12, max_iter = 1000. Each
//! trial fills a fresh filter to its occupancy with plain cuckoo inserts,
//! reaches steady state by as many replacements (delete a random element,
//! insert a new one) as there are elements, then inserts a burst of new
//! elements through the filter's own path (Algorithm 2 with threshold t for
//! the Bloom-Cuckoo variants). Recorded: iterations (bucket accesses) per
//! burst insert — maximum over all trials and mean over all inserts — the
//! elements in the Bloom part after the burst (mean over trials), failures,
//! and the FPR after the burst over ≥ 10^6 negative queries in all.
//!
//! 1. occupancy: cf at 0.92/0.94/0.95, bcf and bcf-tag at 0.9392/0.9596/0.9698
//!    (equal bits per item in the paper's packed layout), burst 256, t = 0, 5, 10.
//! 2. burst size: cf at 0.95, bcf/bcf-tag at 0.9698, bursts 0 (baseline FPR),
//!    128, 256, …, 1024, t = 0, 5, 10. Each trial inserts 1024 and records
//!    the statistics of its first b inserts at every burst size b (a burst
//!    of b from the same steady state is exactly that prefix).
//!
//! Output: tables, `bench/results/bcf_burst.csv`
//! (`filter,occupancy,t,burst,max_iter_seen,mean_iter,bloom_items,fpr,failures`)
//! and PNG plots beside it. `--quick`: 4 trials, fewer bursts.
//! Run: `cargo run --release -p cfdp-bench --bin bcf-burst [-- --quick]`
#![forbid(unsafe_code)]

use cfdp_bench::plot::{save_chart, Chart, Series};
use cfdp_bench::{is_quick, machine_description, results_path, write_csv, SplitMix};
use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, InsertError};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Cf,
    Bcf,
    BcfTag,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Cf => "cf",
            Kind::Bcf => "bcf",
            Kind::BcfTag => "bcf-tag",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Trial {
    max_iter: u32,
    iter_sum: u64,
    inserts: u64,
    bloom_items: usize,
    fp: u64,
    queries: u64,
    failures: u32,
}

const LOG2_BUCKETS: u32 = 15;
const MAX_ITER: u32 = 1000;

/// One trial: fill, steady state, then a burst of `checkpoints.last()`
/// inserts, with the statistics of the first `b` inserts recorded at every
/// checkpoint `b` (a burst of `b` from this steady state is exactly that
/// prefix, so one trial serves every burst size of experiment 2).
fn trial(
    kind: Kind,
    occupancy: f64,
    t: u32,
    checkpoints: &[usize],
    seed: u64,
    queries: u64,
) -> Vec<Trial> {
    let bloom = match kind {
        Kind::Cf => None,
        Kind::Bcf => Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: t,
        }),
        Kind::BcfTag => Some(BloomConfig {
            mode: BloomMode::Tag { bits: 16 },
            threshold: t,
        }),
    };
    let f = Filter::new(Config {
        buckets_log2: Some(LOG2_BUCKETS),
        fingerprint_bits: 12,
        bloom,
        max_kicks: MAX_ITER,
        seed,
        ..Config::default()
    })
    .expect("config");
    let mut rng = SplitMix::new(seed);
    let target = (f.slots() as f64 * occupancy).round() as usize;
    let mut live: Vec<u64> = Vec::with_capacity(target);
    // Fill with plain cuckoo inserts; a key that does not fit leaves the
    // filter unchanged and is simply replaced by another.
    let mut attempts = 0u64;
    while live.len() < target {
        let h = rng.next();
        attempts += 1;
        assert!(
            attempts < 4 * target as u64 + 1_000_000,
            "cannot fill to {occupancy}"
        );
        if f.insert_hash_with(h, 0, None).is_ok() {
            live.push(h);
        }
    }
    // Steady state: as many replacements as elements.
    for _ in 0..live.len() {
        let i = (rng.next() % live.len() as u64) as usize;
        assert!(f.remove_hash(live[i], 0));
        loop {
            let h = rng.next();
            if f.insert_hash_with(h, 0, None).is_ok() {
                live[i] = h;
                break;
            }
        }
    }
    let mut out = Trial::default();
    let mut results = Vec::with_capacity(checkpoints.len());
    let mut neg = SplitMix::new(seed ^ 0x005e_ed0f_f00d);
    let mut measure = |f: &Filter, out: &Trial| {
        let mut o = *out;
        o.bloom_items = f.bloom_len();
        o.queries = queries;
        o.fp = (0..queries).filter(|_| f.contains_hash(neg.next())).count() as u64;
        o
    };
    let burst = checkpoints.iter().copied().max().unwrap_or(0);
    if checkpoints.contains(&0) {
        results.push(measure(&f, &out));
    }
    for i in 1..=burst {
        let h = rng.next();
        let iterations = match f.insert_hash(h, 0) {
            Ok(o) => o.iterations,
            Err(InsertError::Full { iterations }) => {
                out.failures += 1;
                iterations
            }
            Err(e) => panic!("{e}"),
        };
        out.max_iter = out.max_iter.max(iterations);
        out.iter_sum += u64::from(iterations);
        out.inserts += 1;
        if checkpoints.contains(&i) {
            results.push(measure(&f, &out));
        }
    }
    results
}

#[derive(Clone, Copy)]
struct Row {
    kind: Kind,
    occupancy: f64,
    t: Option<u32>,
    burst: usize,
    max_iter: u32,
    mean_iter: f64,
    bloom_items: f64,
    fpr: f64,
    failures: u32,
}

fn run(
    kind: Kind,
    occupancy: f64,
    t: Option<u32>,
    checkpoints: &[usize],
    trials: usize,
) -> Vec<Row> {
    let queries = (1_000_000u64).div_ceil(trials as u64).max(20_000);
    let seeds: Vec<u64> = (0..trials as u64)
        .map(|i| 0xbcf0_0000 + i * 7919 + (occupancy * 1e4) as u64 * 31)
        .collect();
    // per trial, per checkpoint
    let results: Vec<Vec<Trial>> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(2))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| {
                            trial(kind, occupancy, t.unwrap_or(0), checkpoints, seed, queries)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("trial thread"))
            .collect()
    });
    checkpoints
        .iter()
        .enumerate()
        .map(|(ci, &burst)| {
            let at: Vec<&Trial> = results.iter().map(|r| &r[ci]).collect();
            let inserts: u64 = at.iter().map(|r| r.inserts).sum();
            let fp: u64 = at.iter().map(|r| r.fp).sum();
            let q: u64 = at.iter().map(|r| r.queries).sum();
            Row {
                kind,
                occupancy,
                t,
                burst,
                max_iter: at.iter().map(|r| r.max_iter).max().unwrap_or(0),
                mean_iter: at.iter().map(|r| r.iter_sum).sum::<u64>() as f64
                    / inserts.max(1) as f64,
                bloom_items: at.iter().map(|r| r.bloom_items).sum::<usize>() as f64 / trials as f64,
                fpr: fp as f64 / q as f64,
                failures: at.iter().map(|r| r.failures).sum(),
            }
        })
        .collect()
}

fn print(r: &Row) {
    println!(
        "{:<8} {:>7.4} {:>4} {:>6} {:>8} {:>9.3} {:>9.1} {:>10.6} {:>8}",
        r.kind.name(),
        r.occupancy,
        r.t.map_or("-".into(), |t| t.to_string()),
        r.burst,
        r.max_iter,
        r.mean_iter,
        r.bloom_items,
        r.fpr,
        r.failures
    );
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let trials = if quick { 4 } else { 100 };
    println!("machine: {}", machine_description());
    println!(
        "m = 2^{LOG2_BUCKETS} buckets, f = 12, max_iter = {MAX_ITER}, {trials} trials per row"
    );
    let header = format!(
        "{:<8} {:>7} {:>4} {:>6} {:>8} {:>9} {:>9} {:>10} {:>8}",
        "filter", "occup.", "t", "burst", "max it", "mean it", "bloom", "fpr", "failures"
    );
    let mut rows: Vec<Row> = Vec::new();

    println!("\n1. occupancy (burst 256)\n{header}");
    let pairs = [(0.92, 0.9392), (0.94, 0.9596), (0.95, 0.9698)];
    for &(o_cf, o_bcf) in &pairs {
        for r in run(Kind::Cf, o_cf, None, &[256], trials) {
            print(&r);
            rows.push(r);
        }
        for kind in [Kind::Bcf, Kind::BcfTag] {
            for t in [0, 5, 10] {
                for r in run(kind, o_bcf, Some(t), &[256], trials) {
                    print(&r);
                    rows.push(r);
                }
            }
        }
    }
    let exp1 = rows.len();

    println!("\n2. burst size (cf at 0.95, bcf at 0.9698)\n{header}");
    let bursts: Vec<usize> = if quick {
        vec![0, 256, 1024]
    } else {
        (0..=8).map(|i| i * 128).collect()
    };
    let mut exp2: Vec<Row> = run(Kind::Cf, 0.95, None, &bursts, trials);
    for kind in [Kind::Bcf, Kind::BcfTag] {
        for t in [0, 5, 10] {
            exp2.extend(run(kind, 0.9698, Some(t), &bursts, trials));
        }
    }
    // Print grouped by burst size, as the paper's figures read.
    exp2.sort_by_key(|r| r.burst);
    for r in &exp2 {
        print(r);
    }
    rows.extend(exp2);

    let csv: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{},{},{},{},{},{:.4},{:.2},{:.7},{}",
                r.kind.name(),
                r.occupancy,
                r.t.map_or("none".into(), |t| t.to_string()),
                r.burst,
                r.max_iter,
                r.mean_iter,
                r.bloom_items,
                r.fpr,
                r.failures
            )
        })
        .collect();
    let path = results_path("bcf_burst.csv");
    write_csv(
        &path,
        "filter,occupancy,t,burst,max_iter_seen,mean_iter,bloom_items,fpr,failures",
        &csv,
    )
    .expect("write csv");
    println!("\nwrote {}", path.display());

    // Plots. Experiment 1 is drawn against the cf occupancy of each
    // equal-bits-per-item pair.
    let label = |r: &Row| match r.t {
        None => r.kind.name().to_string(),
        Some(t) => format!("{} t={t}", r.kind.name()),
    };
    let pair_x = |o: f64| {
        pairs
            .iter()
            .find(|p| p.0 == o || p.1 == o)
            .map_or(o, |p| p.0)
    };
    let group = |rs: &[Row], x: &dyn Fn(&Row) -> f64, y: &dyn Fn(&Row) -> f64| -> Vec<Series> {
        let mut names: Vec<String> = Vec::new();
        for r in rs {
            if !names.contains(&label(r)) {
                names.push(label(r));
            }
        }
        names
            .into_iter()
            .map(|n| Series {
                points: rs
                    .iter()
                    .filter(|r| label(r) == n)
                    .map(|r| (x(r), y(r)))
                    .collect(),
                name: n,
            })
            .collect()
    };
    let (e1, e2) = rows.split_at(exp1);
    let charts = [
        (
            "bcf_burst_max_iter.png",
            "Worst-case iterations, burst of 256",
            "occupancy (cf; bcf at equal bits/item)",
            "max iterations",
            group(e1, &|r| pair_x(r.occupancy), &|r| {
                f64::from(r.max_iter.max(1))
            }),
            true,
        ),
        (
            "bcf_burst_mean_iter.png",
            "Mean iterations per insert, burst of 256",
            "occupancy (cf; bcf at equal bits/item)",
            "mean iterations",
            group(e1, &|r| pair_x(r.occupancy), &|r| r.mean_iter),
            true,
        ),
        (
            "bcf_burst_bloom_items.png",
            "Elements in the Bloom part after a burst of 256",
            "occupancy (cf; bcf at equal bits/item)",
            "elements (mean over trials)",
            group(
                &e1.iter()
                    .filter(|r| r.kind != Kind::Cf)
                    .map(|r| Row { ..*r })
                    .collect::<Vec<_>>(),
                &|r| pair_x(r.occupancy),
                &|r| r.bloom_items,
            ),
            false,
        ),
        (
            "bcf_burst_size_max_iter.png",
            "Worst-case iterations vs burst size (cf 0.95, bcf 0.9698)",
            "burst size",
            "max iterations",
            group(
                &e2.iter()
                    .filter(|r| r.burst > 0)
                    .map(|r| Row { ..*r })
                    .collect::<Vec<_>>(),
                &|r| r.burst as f64,
                &|r| f64::from(r.max_iter.max(1)),
            ),
            true,
        ),
        (
            "bcf_burst_size_mean_iter.png",
            "Mean iterations vs burst size (cf 0.95, bcf 0.9698)",
            "burst size",
            "mean iterations",
            group(
                &e2.iter()
                    .filter(|r| r.burst > 0)
                    .map(|r| Row { ..*r })
                    .collect::<Vec<_>>(),
                &|r| r.burst as f64,
                &|r| r.mean_iter,
            ),
            true,
        ),
        (
            "bcf_burst_fpr.png",
            "False-positive rate after the burst",
            "burst size",
            "FPR",
            group(e2, &|r| r.burst as f64, &|r| r.fpr),
            false,
        ),
    ];
    for (file, title, xl, yl, series, log_y) in charts {
        let chart = Chart {
            title,
            x_label: xl,
            y_label: yl,
            series,
            log_y,
        };
        save_chart(file, &chart);
    }
}
