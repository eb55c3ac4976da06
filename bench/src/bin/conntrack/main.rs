//! The connection table of stateful rules (`cfdp-conntrack`), measured
//! where its design is meant to matter:
//!
//! - **A burst of new connections into a nearly full table** (a flash
//!   crowd, or a SYN flood of spoofed sources), through the filter's
//!   Bloom-assisted insert path beside its plain cuckoo path: the table's
//!   capacity is 95 % of its filter's slots (the filter is sized so), it is
//!   filled with established connections to 85 % of the slots, then a
//!   burst of SYNs opens the rest. Per open: p50, p99, p99.9 and max (ns,
//!   one clock read each side), refusals, the filter's load and Bloom-part
//!   items after.
//! - **Lookups**: a packet of an established connection (a hit: key and
//!   hash, filter, the slot's exact key, state step; no lock) and a packet
//!   of no connection (the filter's negative), one thread; and opens plus
//!   lookups from 1 and 2 threads at once (this VM has 2 cores).
//!
//! - **Beside `rte_hash`** (`--rte-hash HARNESS`, run by
//!   `bench/conntrack-rte-hash.sh`): the same keys and occupancy through
//!   cfdp's table and through DPDK's `rte_hash` (a C harness run as a
//!   child), rounds alternating: inserts, established lookups one at a
//!   time and 32 at a time, strangers.
//!
//! - **The worker path with stateless rules**, which `cfdp run` runs with
//!   a connection table always attached: one worker, 64-byte UDP frames
//!   from memory against 100k exact-flow rules, half of them matching,
//!   without a table, with an empty one (the step is skipped) and with one
//!   holding 100k connections the traffic never belongs to (every packet
//!   then pays the table's lock-free negative), rounds alternating.
//!
//! - **A SYN flood against a server port a stateful rule opens**: one
//!   worker, 64-byte TCP frames: ACKs of 100k established connections
//!   alone, then half of them mixed with spoofed SYNs to the same port
//!   (each a new embryonic connection, the table's capacity 150k), then a
//!   flood the server answers (a third ACKs of the established, a third
//!   spoofed SYNs, a third the server's SYN-ACK to each: the table fills
//!   with SYN_RECV entries, which early drop must take): the worker's
//!   rate and the share of the established connections still in the
//!   table, established, afterwards.
//!
//! - **Scaling** (`scaling.rs`): opens, lookups and both from 1, 2, … N
//!   threads, each its own share of the keys; `conntrack_scaling.csv`.
//!
//! Output: tables, `bench/results/conntrack.csv` (quick:
//! `bench/results/quick/`). Run: `cargo run --release -p cfdp-bench --bin
//! conntrack [-- --quick]`.
#![forbid(unsafe_code)]

mod common;
mod flood;
mod rte_hash;
mod scaling;

use common::{conn, establish, percentile, table, TRACKED};

use std::time::Instant;

use cfdp_bench::{is_quick, machine_description, median, results_path, write_csv};
use cfdp_conntrack::state::tcp::{ACK, SYN};
use cfdp_conntrack::{ConnTable, OpenError, Timeouts};
use cfdp_rules::{Action, HashSecret};

struct Burst {
    p50: u64,
    p99: u64,
    p999: u64,
    max: u64,
    refused: usize,
    load: f64,
    bloom_items: usize,
    burst: usize,
}

/// Fills to 85 % of the slots with established connections, then opens
/// the rest of the capacity (`pct` % of the slots) as a burst of SYNs,
/// timing each.
fn burst(log2: u32, bloom: bool, pct: usize) -> Burst {
    let (t, slots) = table(log2, bloom, pct);
    let fill = slots * 85 / 100;
    for i in 0..fill as u32 {
        establish(&t, &conn(i, false));
    }
    let n = t.capacity() - fill;
    let mut ns = Vec::with_capacity(n);
    let mut refused = 0;
    for i in 0..n as u32 {
        let k = conn(i, true);
        let s = Instant::now();
        let r = t.open(&k, SYN, 1, TRACKED, 60, 1);
        ns.push(s.elapsed().as_nanos() as u64);
        if r == Err(OpenError::Full) {
            refused += 1;
        }
    }
    ns.sort_unstable();
    let f = t.filter_stats();
    Burst {
        p50: percentile(&ns, 0.5),
        p99: percentile(&ns, 0.99),
        p999: percentile(&ns, 0.999),
        max: *ns.last().unwrap(),
        refused,
        load: f.load_factor,
        bloom_items: f.bloom_items,
        burst: n,
    }
}

/// Million operations a second: `f` run `n` times, median of `rounds`.
fn mops(rounds: usize, n: u32, mut f: impl FnMut(u32)) -> f64 {
    let mut r: Vec<f64> = (0..rounds)
        .map(|_| {
            let s = Instant::now();
            for i in 0..n {
                f(i);
            }
            f64::from(n) / s.elapsed().as_secs_f64() / 1e6
        })
        .collect();
    median(&mut r)
}

fn main() {
    cfdp_bench::expect_flags(&["--part", "--rte-hash", "--threads"]);
    let quick = is_quick();
    let log2 = if quick { 16 } else { 18 };
    let rounds = if quick { 3 } else { 7 };
    if let Some(harness) = cfdp_bench::arg("--rte-hash") {
        rte_hash::side_by_side(&harness, log2, rounds);
        return;
    }
    // `--part flood` (or burst, ops, worker, answered) runs one part
    // alone, for a profiler; the CSV is then not written (but scaling's,
    // its own). `--part established`: the flood part's established
    // traffic alone.
    if let Some(part) = cfdp_bench::arg("--part") {
        match part.as_str() {
            "burst" => drop(burst_rows(log2, rounds)),
            "ops" => drop(ops_rows(log2, rounds)),
            "worker" => drop(worker_rows(quick, rounds)),
            "flood" => drop(flood::flood_rows(quick, rounds, None)),
            "established" => drop(flood::flood_rows(quick, rounds, Some("established"))),
            "answered" => flood::answered_flood(quick),
            "scaling" => write_scaling(quick, rounds),
            other => {
                eprintln!(
                    "conntrack: --part {other}: burst, ops, worker, flood, established, answered or scaling"
                );
                std::process::exit(2);
            }
        }
        return;
    }
    let mut rows = burst_rows(log2, rounds);
    rows.extend(ops_rows(log2, rounds));
    rows.extend(worker_rows(quick, rounds));
    rows.extend(flood::flood_rows(quick, rounds, None));
    flood::answered_flood(quick);
    write_scaling(quick, rounds);
    let path = results_path("conntrack.csv");
    write_csv(
        &path,
        "part,variant,slots_or_threads,n,p50_ns_or_mops,p99_ns,p999_ns,max_ns,refused,load,bloom_items",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// The scaling rows, in their own CSV (`conntrack_scaling.csv`): each
/// machine's run is its own file's, the cores in every row.
fn write_scaling(quick: bool, rounds: usize) {
    let rows = scaling::scaling_rows(quick, rounds);
    let path = results_path("conntrack_scaling.csv");
    write_csv(
        &path,
        "part,workload,threads,ops,mops,vs_one_thread,cores",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// The bursts into a nearly full table: a row per insert path and capacity.
fn burst_rows(log2: u32, rounds: usize) -> Vec<String> {
    let machine = machine_description();
    let mut rows = Vec::new();
    println!(
        "burst of SYNs into a table at 85 % of its filter's {} slots, up to its capacity ({machine})",
        4usize << log2
    );
    println!(
        "{:<8} {:>4} {:>7} {:>7} {:>7} {:>8} {:>9} {:>8} {:>6} {:>7}",
        "insert",
        "cap%",
        "burst",
        "p50_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "refused",
        "load",
        "bloom"
    );
    // Alternating, medians per figure over rounds. 95 %: the table as
    // configured (its filter sized for the capacity at 95 % load); 98 %:
    // more connections in the same filter, where the walks grow.
    let variants = [(true, 95), (false, 95), (true, 98), (false, 98)];
    let mut results: Vec<Vec<Burst>> = variants.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds.min(5) {
        for (v, &(bloom, pct)) in variants.iter().enumerate() {
            results[v].push(burst(log2, bloom, pct));
        }
    }
    for (v, &(bloom, pct)) in variants.iter().enumerate() {
        let name = if bloom { "bloom" } else { "cuckoo" };
        let b = &results[v];
        let med = |f: &dyn Fn(&Burst) -> u64| {
            let mut x: Vec<f64> = b.iter().map(|r| f(r) as f64).collect();
            median(&mut x) as u64
        };
        let (p50, p99, p999, max) = (
            med(&|r| r.p50),
            med(&|r| r.p99),
            med(&|r| r.p999),
            med(&|r| r.max),
        );
        let refused = med(&|r| r.refused as u64);
        let last = b.last().unwrap();
        println!(
            "{name:<8} {pct:>4} {:>7} {p50:>7} {p99:>7} {p999:>8} {max:>9} {refused:>8} {:>6.3} {:>7}",
            last.burst, last.load, last.bloom_items
        );
        rows.push(format!(
            "burst,{name}-{pct},{},{},{p50},{p99},{p999},{max},{refused},{:.4},{}",
            4usize << log2,
            last.burst,
            last.load,
            last.bloom_items
        ));
    }

    rows
}

/// Lookups (one thread), and opens with their answers (1 and 2 threads).
fn ops_rows(log2: u32, rounds: usize) -> Vec<String> {
    let mut rows = Vec::new();
    // Lookups, one thread.
    let (t, slots) = table(log2, true, 95);
    let n = (slots * 80 / 100) as u32;
    for i in 0..n {
        establish(&t, &conn(i, false));
    }
    let hit = mops(rounds, n, |i| {
        std::hint::black_box(t.lookup(&conn(i, false).reply(), ACK, 60, 2));
    });
    let miss = mops(rounds, n, |i| {
        std::hint::black_box(t.lookup(&conn(i, true), ACK, 60, 2));
    });
    println!("lookups, one thread: established {hit:.2} M/s, no connection {miss:.2} M/s");
    rows.push(format!("lookup,established,1,{n},{hit:.3},,,,,,"));
    rows.push(format!("lookup,none,1,{n},{miss:.3},,,,,,"));

    // Opens and lookups from 1 and 2 threads: each thread opens its own
    // connections and looks each one's answer up (two directions of one
    // connection, as a worker sees them).
    for threads in [1u32, 2] {
        let per = n / 4 / threads;
        let mut r: Vec<f64> = (0..rounds)
            .map(|_| {
                let (t, _) = table(log2, true, 95);
                let s = Instant::now();
                std::thread::scope(|sc| {
                    for w in 0..threads {
                        let t = &t;
                        sc.spawn(move || {
                            for i in 0..per {
                                let k = conn(w * per + i, false);
                                let _ = t.open(&k, SYN, 1, TRACKED, 60, 0);
                                std::hint::black_box(t.lookup(&k.reply(), SYN | ACK, 60, 0));
                            }
                        });
                    }
                });
                f64::from(2 * per * threads) / s.elapsed().as_secs_f64() / 1e6
            })
            .collect();
        let m = median(&mut r);
        println!("open + answer, {threads} thread(s): {m:.2} M operations/s");
        rows.push(format!(
            "concurrent,open+lookup,{threads},{},{m:.3},,,,,,",
            per * threads
        ));
    }

    rows
}

/// The worker path with stateless rules and a connection table that is
/// absent, empty, or full of other connections.
fn worker_rows(quick: bool, rounds: usize) -> Vec<String> {
    use cfdp_bench::{bench_flow, udp_frame, SplitMix};
    use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
    use cfdp_rules::{Match, Rule};
    let n: u64 = 100_000;
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
    let busy = std::sync::Arc::new(
        ConnTable::new(200_000, Timeouts::default(), HashSecret::from_seed(5)).expect("table"),
    );
    for i in 0..100_000 {
        busy.open(&conn(i, true), SYN, 1, TRACKED, 60, 0)
            .expect("room");
    }
    let empty = std::sync::Arc::new(
        ConnTable::new(200_000, Timeouts::default(), HashSecret::from_seed(5)).expect("table"),
    );
    let variants = [
        ("none", None),
        ("empty", Some(empty)),
        ("100k-other", Some(busy)),
    ];
    let planes: Vec<_> = variants
        .iter()
        .map(|(_, t)| {
            cfdp_control::RuleStore::fixed_tracked(&rules[..], Mode::Verify, 1, t.clone())
                .expect("rules load")
        })
        .collect();
    let mut rng = SplitMix::new(7);
    let pool = if quick { 1 << 16 } else { 1 << 20 };
    let frames: Vec<Vec<u8>> = (0..pool)
        .map(|_| {
            let k = if rng.next().is_multiple_of(2) {
                bench_flow(rng.next() % n)
            } else {
                bench_flow(n + rng.next() % (1 << 30))
            };
            udp_frame(&k)
        })
        .collect();
    let secs = if quick { 0.2 } else { 0.6 };
    let mut samples = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (v, (_store, cx)) in planes.iter().enumerate() {
            let mut w = Worker::new(cx, 0, WorkerOptions::default());
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(&frames, Limit::Seconds(secs));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut w, &tables).packets;
            samples[v].push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
        }
    }
    let mut rows = Vec::new();
    println!("worker path, 100k flow rules, 50 % matching, one worker (Mpps, median of {rounds})");
    for (v, (name, _)) in variants.iter().enumerate() {
        let m = median(&mut samples[v]);
        println!("  table {name:<11} {m:.2}");
        rows.push(format!("worker,{name},1,{n},{m:.3},,,,,,"));
    }
    rows
}
