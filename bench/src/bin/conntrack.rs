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
//! - **Lookups**: a packet of an established connection (a hit: filter,
//!   stripe lock, exact key, state step) and a packet of no connection
//!   (the filter's lock-free negative), one thread; and opens plus
//!   lookups from 1 and 2 threads at once (this VM has 2 cores).
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
//!   (each a new embryonic connection, the table's capacity 150k): the
//!   worker's rate and the share of the established connections still in
//!   the table, established, afterwards.
//!
//! Output: tables, `bench/results/conntrack.csv` (quick:
//! `bench/results/quick/`). Run: `cargo run --release -p cfdp-bench --bin
//! conntrack [-- --quick]`.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use cfdp_bench::{is_quick, machine_description, median, results_path, write_csv};
use cfdp_conntrack::state::tcp::{ACK, SYN};
use cfdp_conntrack::table::Options;
use cfdp_conntrack::{ConnTable, OpenError, State, Timeouts};
use cfdp_rules::{Action, Allowing, FlowKey, HashSecret};

const TRACKED: Action = Action::Track(Allowing::Allow);

/// Connection `i`: a client of 10.0.0.0/8 (or, `spoofed`, of 100.64.0.0/10)
/// to 192.0.2.1:443.
fn conn(i: u32, spoofed: bool) -> FlowKey {
    let base = if spoofed { 0x6440_0000 } else { 0x0a00_0000 };
    let src = IpAddr::V4(Ipv4Addr::from(base + (i >> 4)));
    FlowKey::new(
        src,
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        6,
        1024 + (i & 15) as u16 * 4000,
        443,
    )
}

fn back(k: &FlowKey) -> FlowKey {
    FlowKey {
        src: k.dst,
        dst: k.src,
        sport: k.dport,
        dport: k.sport,
        ..*k
    }
}

/// A table whose capacity is `pct` % of its filter's 4 × 2^`log2` slots.
fn table(log2: u32, bloom: bool, pct: usize) -> (ConnTable, usize) {
    let slots = 4usize << log2;
    let capacity = slots * pct / 100;
    let opts = Options {
        bloom,
        buckets_log2: Some(log2),
        ..Options::default()
    };
    let t = ConnTable::with_options(
        capacity,
        Timeouts::default(),
        HashSecret::from_seed(11),
        opts,
    )
    .expect("table");
    assert_eq!(
        t.filter_stats().buckets,
        1 << log2,
        "filter sized to the capacity"
    );
    (t, slots)
}

fn establish(t: &ConnTable, k: &FlowKey) {
    t.open(k, SYN, false, 1, TRACKED, 60, 0).expect("room");
    t.lookup(&back(k), SYN | ACK, 60, 0);
    t.lookup(k, ACK, 60, 0);
}

fn percentile(v: &[u64], p: f64) -> u64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

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
        let r = t.open(&k, SYN, false, 1, TRACKED, 60, 1);
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
    let quick = is_quick();
    let log2 = if quick { 16 } else { 18 };
    let rounds = if quick { 3 } else { 7 };
    let mut rows = burst_rows(log2, rounds);
    rows.extend(ops_rows(log2, rounds));
    rows.extend(worker_rows(quick, rounds));
    rows.extend(flood_rows(quick, rounds));
    let path = results_path("conntrack.csv");
    write_csv(
        &path,
        "part,variant,slots_or_threads,n,p50_ns_or_mops,p99_ns,p999_ns,max_ns,refused,load,bloom_items",
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
        std::hint::black_box(t.lookup(&back(&conn(i, false)), ACK, 60, 2));
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
                                let _ = t.open(&k, SYN, false, 1, TRACKED, 60, 0);
                                std::hint::black_box(t.lookup(&back(&k), SYN | ACK, 60, 0));
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
            matcher: Match::Flow(bench_flow(i)),
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
        busy.open(&conn(i, true), SYN, false, 1, TRACKED, 60, 0)
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

/// A 64-byte TCP frame of `k` with `flags`.
fn tcp_frame(k: &FlowKey, flags: u8) -> Vec<u8> {
    let ip = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
    let mut h = etherparse::TcpHeader::new(k.sport, k.dport, 1, 65535);
    h.syn = flags & SYN != 0;
    h.ack = flags & ACK != 0;
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(ip(&k.src), ip(&k.dst), 64)
        .tcp_header(h);
    let mut out = Vec::new();
    b.write(&mut out, &[]).expect("frame");
    out
}

/// Client `i` of 100.64.0.0/10 to the server 10.0.0.1:443.
fn client(i: u32) -> FlowKey {
    FlowKey::new(
        IpAddr::V4(Ipv4Addr::from(0x6440_0000 + (i >> 4))),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        6,
        1024 + (i & 15) as u16 * 4000,
        443,
    )
}

/// The worker under a SYN flood: established traffic alone, then mixed
/// half and half with spoofed SYNs a stateful rule lets open connections.
fn flood_rows(quick: bool, rounds: usize) -> Vec<String> {
    use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
    let n = 100_000u32;
    let rules = cfdp_rules::parse_rule_file(
        r#"{"rules": [
          {"id": 1, "priority": 10, "match": {"dst_prefix": "10.0.0.1/32", "proto": "tcp", "dport": 443}, "action": "allow", "track": true},
          {"id": 9, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}"#,
    )
    .expect("rules");
    let pool = if quick { 1 << 16 } else { 1 << 18 };
    let established: Vec<Vec<u8>> = (0..pool as u32)
        .map(|i| tcp_frame(&client(i % n), ACK))
        .collect();
    let mut rng = cfdp_bench::SplitMix::new(9);
    let mixed: Vec<Vec<u8>> = (0..pool as u32)
        .map(|i| {
            if i % 2 == 0 {
                tcp_frame(&client(i % n), ACK)
            } else {
                // A spoofed source from elsewhere, never the same twice.
                let r = rng.next();
                let k = FlowKey::new(
                    IpAddr::V4(Ipv4Addr::from(0xc600_0000 | (r as u32 & 0x00ff_ffff))),
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                    6,
                    1024 + (r >> 32) as u16 % 60_000,
                    443,
                );
                tcp_frame(&k, SYN)
            }
        })
        .collect();
    let secs = if quick { 0.2 } else { 0.6 };
    let mut rows = Vec::new();
    println!(
        "SYN flood, 100k established connections, table of 150k, one worker (median of {rounds})"
    );
    for (name, frames) in [
        ("established", &established),
        ("established+synflood", &mixed),
    ] {
        let mut mpps = Vec::new();
        let mut passed = Vec::new();
        for _ in 0..rounds {
            // A fresh table and node each round: the flood fills it.
            let table = std::sync::Arc::new(
                ConnTable::new(150_000, Timeouts::default(), HashSecret::from_seed(2))
                    .expect("table"),
            );
            let (store, cx) = cfdp_control::RuleStore::fixed_tracked(
                &rules[..],
                Mode::Verify,
                1,
                Some(std::sync::Arc::clone(&table)),
            )
            .expect("rules load");
            let slot = 0;
            for i in 0..n {
                let k = client(i);
                table
                    .open(&k, SYN, false, slot, TRACKED, 60, 0)
                    .expect("room");
                table.lookup(&back(&k), SYN | ACK, 60, 0);
                table.lookup(&k, ACK, 60, 0);
            }
            let mut w = Worker::new(&cx, 0, WorkerOptions::default());
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(frames, Limit::Seconds(secs));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut w, &tables).packets;
            mpps.push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            // Every established connection still in the table, established
            // (its packets then pass).
            let alive = table.counts().by_state[State::TcpEstablished.index()];
            passed.push(alive as f64 / f64::from(n));
            drop(store);
        }
        let (m, p) = (median(&mut mpps), median(&mut passed));
        println!("  {name:<22} {m:.2} Mpps, established connections kept {p:.4}");
        rows.push(format!("flood,{name},1,{n},{m:.3},,,,,{p:.5},"));
    }
    rows
}
