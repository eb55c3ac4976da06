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
//! Output: tables, `bench/results/conntrack.csv` (quick:
//! `bench/results/quick/`). Run: `cargo run --release -p cfdp-bench --bin
//! conntrack [-- --quick]`.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use cfdp_bench::{is_quick, machine_description, median, results_path, write_csv};
use cfdp_conntrack::state::tcp::{ACK, FIN, SYN};
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
    t.open(k, SYN, 1, TRACKED, 60, 0).expect("room");
    t.lookup(&k.reply(), SYN | ACK, 60, 0);
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
    let quick = is_quick();
    let log2 = if quick { 16 } else { 18 };
    let rounds = if quick { 3 } else { 7 };
    if let Some(harness) = cfdp_bench::arg("--rte-hash") {
        side_by_side(&harness, log2, rounds);
        return;
    }
    // `--part flood` (or burst, ops, worker, answered) runs one part
    // alone, for a profiler; the CSV is then not written.
    if let Some(part) = cfdp_bench::arg("--part") {
        match part.as_str() {
            "burst" => drop(burst_rows(log2, rounds)),
            "ops" => drop(ops_rows(log2, rounds)),
            "worker" => drop(worker_rows(quick, rounds)),
            "flood" => drop(flood_rows(quick, rounds)),
            "answered" => answered_flood(quick),
            other => {
                eprintln!("conntrack: --part {other}: burst, ops, worker, flood or answered");
                std::process::exit(2);
            }
        }
        return;
    }
    let mut rows = burst_rows(log2, rounds);
    rows.extend(ops_rows(log2, rounds));
    rows.extend(worker_rows(quick, rounds));
    rows.extend(flood_rows(quick, rounds));
    answered_flood(quick);
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

/// A spoofed client of the flood (from elsewhere, never the same twice).
fn spoofed(r: u64) -> FlowKey {
    FlowKey::new(
        IpAddr::V4(Ipv4Addr::from(0xc600_0000 | (r as u32 & 0x00ff_ffff))),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        6,
        1024 + (r >> 32) as u16 % 60_000,
        443,
    )
}

/// The flood's traffic: ACKs of the `n` established connections alone;
/// half of them, half spoofed SYNs; a third each of ACKs, spoofed SYNs
/// and the server's SYN-ACK to each SYN.
fn flood_pools(quick: bool, n: u32) -> [Vec<Vec<u8>>; 3] {
    let pool = if quick { 1u32 << 16 } else { 1 << 18 };
    let established = (0..pool).map(|i| tcp_frame(&client(i % n), ACK)).collect();
    let mut rng = cfdp_bench::SplitMix::new(9);
    let mixed = (0..pool)
        .map(|i| {
            if i % 2 == 0 {
                tcp_frame(&client(i % n), ACK)
            } else {
                tcp_frame(&spoofed(rng.next()), SYN)
            }
        })
        .collect();
    let mut r = 0;
    let answered = (0..pool)
        .map(|i| match i % 3 {
            0 => tcp_frame(&client(i % n), ACK),
            1 => {
                r = rng.next();
                tcp_frame(&spoofed(r), SYN)
            }
            // The server's answer to the SYN before it.
            _ => tcp_frame(&spoofed(r).reply(), SYN | ACK),
        })
        .collect();
    [established, mixed, answered]
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
    let [established, mixed, answered] = flood_pools(quick, n);
    let secs = if quick { 0.2 } else { 0.6 };
    let mut rows = Vec::new();
    println!(
        "SYN flood, 100k established connections, table of 150k, one worker (median of {rounds})"
    );
    let variants = [
        ("established", &established),
        ("established+synflood", &mixed),
        ("established+answered-synflood", &answered),
    ];
    let mut mpps = vec![Vec::new(); variants.len()];
    let mut passed = vec![Vec::new(); variants.len()];
    let mut invalid = vec![Vec::new(); variants.len()];
    // Rounds alternating between the two: the ratio is of runs side by
    // side, not of two blocks a drift of the machine apart.
    for _ in 0..rounds {
        for (v, (_, frames)) in variants.iter().enumerate() {
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
                table.open(&k, SYN, slot, TRACKED, 60, 0).expect("room");
                table.lookup(&k.reply(), SYN | ACK, 60, 0);
                table.lookup(&k, ACK, 60, 0);
            }
            let mut w = Worker::new(&cx, 0, WorkerOptions::default());
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(frames, Limit::Seconds(secs));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut w, &tables).packets;
            mpps[v].push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            // Every established connection still in the table, established
            // (its packets then pass).
            let alive = table.counts().by_state[State::TcpEstablished.index()];
            passed[v].push(alive as f64 / f64::from(n));
            invalid[v].push(table.counts().invalid as f64 / done as f64);
            drop(store);
        }
    }
    for (v, (name, _)) in variants.iter().enumerate() {
        let (m, p) = (median(&mut mpps[v]), median(&mut passed[v]));
        let bad = median(&mut invalid[v]);
        println!(
            "  {name:<22} {m:.2} Mpps, established connections kept {p:.4}, invalid packets {bad:.4}"
        );
        rows.push(format!("flood,{name},1,{n},{m:.3},,,,,{p:.5},"));
    }
    rows
}

/// The conntrack issue's answered flood, at the table: a table of 150k
/// connections (quick: 15k) holding 100k established (quick: 10k), then
/// ten times its capacity of spoofed SYNs each answered by the server's
/// SYN-ACK (SYN_RECV entries, which early drop takes), and among them,
/// every tenth step, a legitimate client's short connection (handshake,
/// then closed both ways). Each flood SYN's
/// open is timed alone (one clock read each side); afterwards every
/// established connection must still be there. Then, for what a refused
/// open costs, as many spoofed SYNs against a table full of established
/// connections.
fn answered_flood(quick: bool) {
    let (cap, est) = if quick {
        (15_000u32, 10_000u32)
    } else {
        (150_000, 100_000)
    };
    let mut rng = cfdp_bench::SplitMix::new(11);
    let f = answered_table(cap, est, &mut rng);
    let (mut opened, mut refused) = (f.opened, refused_in_full_table(cap, &mut rng));
    let stat = |v: &mut Vec<u64>| {
        v.sort_unstable();
        if v.is_empty() {
            (0, 0, 0, 0)
        } else {
            let max = *v.last().expect("not empty");
            (
                percentile(v, 0.5),
                percentile(v, 0.99),
                percentile(v, 0.999),
                max,
            )
        }
    };
    let (o, r) = (stat(&mut opened), stat(&mut refused));
    let legit_share = f64::from(f.legit_ok) / f64::from(f.legit.max(1));
    let kept_share = f.kept as f64 / f64::from(est);
    println!(
        "answered SYN flood of 10x the capacity ({cap}), {est} established: opened {} (p50 {} ns, p99 {} ns, p99.9 {} ns); a full table's refused opens {} (p50 {} ns, p99 {} ns, max {} ns); legitimate short connections completed {legit_share:.4}, established kept {kept_share:.4}",
        opened.len(), o.0, o.1, o.2, refused.len(), r.0, r.1, r.3,
    );
    let path = results_path("conntrack_answered_flood.csv");
    write_csv(
        &path,
        "capacity,established,flood_syns,opened,open_p50_ns,open_p99_ns,open_p999_ns,open_max_ns,refused,refused_p50_ns,refused_p99_ns,refused_max_ns,legit,legit_completed_share,established_kept_share",
        &[format!(
            "{cap},{est},{},{},{},{},{},{},{},{},{},{},{},{legit_share:.4},{kept_share:.5}",
            10 * cap,
            opened.len(),
            o.0,
            o.1,
            o.2,
            o.3,
            refused.len(),
            r.0,
            r.1,
            r.3,
            f.legit
        )],
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// What the answered flood did to the table.
struct Answered {
    /// Each flood SYN's open, ns.
    opened: Vec<u64>,
    legit: u32,
    legit_ok: u32,
    /// Established connections still there, established, after it.
    kept: usize,
}

/// The answered flood into a table of `cap` holding `est` established.
fn answered_table(cap: u32, est: u32, rng: &mut cfdp_bench::SplitMix) -> Answered {
    let t =
        ConnTable::new(cap as usize, Timeouts::default(), HashSecret::from_seed(5)).expect("table");
    for i in 0..est {
        establish(&t, &client(i));
    }
    let mut opened = Vec::new();
    let (mut legit, mut legit_ok) = (0u32, 0u32);
    for step in 0..10 * cap {
        let k = spoofed(rng.next());
        let s = Instant::now();
        let r = t.open(&k, SYN, 1, TRACKED, 60, 1);
        opened.push(s.elapsed().as_nanos() as u64);
        if r.is_ok() {
            t.lookup(&k.reply(), SYN | ACK, 60, 1);
        }
        if step % 10 == 0 {
            let c = client(est + legit);
            legit += 1;
            if t.open(&c, SYN, 1, TRACKED, 60, 1).is_ok() {
                t.lookup(&c.reply(), SYN | ACK, 60, 1);
                legit_ok += u32::from(t.lookup(&c, ACK, 60, 1).is_some());
                // A short connection: closed both ways (TIME_WAIT, which
                // early drop may take).
                t.lookup(&c, FIN | ACK, 60, 1);
                t.lookup(&c.reply(), FIN | ACK, 60, 1);
                t.lookup(&c, ACK, 60, 1);
            }
        }
    }
    let kept = (0..est)
        .filter(|&i| t.peek(&client(i)).map(|h| h.state) == Some(State::TcpEstablished))
        .count();
    Answered {
        opened,
        legit,
        legit_ok,
        kept,
    }
}

/// What a refused open costs: `cap` spoofed SYNs against a table full of
/// established connections, where every early drop's scan (64 slots at
/// most) finds nothing to take. Each refused open's ns.
fn refused_in_full_table(cap: u32, rng: &mut cfdp_bench::SplitMix) -> Vec<u64> {
    let full =
        ConnTable::new(cap as usize, Timeouts::default(), HashSecret::from_seed(6)).expect("table");
    for i in 0..cap {
        establish(&full, &client(i));
    }
    let mut refused = Vec::new();
    for _ in 0..cap {
        let k = spoofed(rng.next());
        let s = Instant::now();
        let r = full.open(&k, SYN, 1, TRACKED, 60, 1);
        let ns = s.elapsed().as_nanos() as u64;
        assert!(
            r.is_err(),
            "a full table of established connections took a SYN"
        );
        refused.push(ns);
    }
    refused
}

/// A prime: `i * STRIDE % n` visits `0..n` once for any `n` it does not
/// divide (the harness looks keys up in the same order).
const STRIDE: u64 = 1_000_003;

/// One side's figures on the shared keys: the burst's insert latencies,
/// failures, and lookups (established singly and in bursts of 32,
/// strangers singly).
#[derive(Clone, Copy, Default)]
struct Side {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    failed: f64,
    single: f64,
    bulk: f64,
    miss: f64,
    /// The memory's page size, `2M` or `4K`: for cfdp's table whether the
    /// kernel backed the process's memory with transparent huge pages
    /// (its arrays ask for them), for `rte_hash` what the harness says.
    pages: &'static str,
}

/// cfdp's table on `keys` (the first `fill` established, the next `burst`
/// opened one at a time, the rest strangers), as the harness does with
/// `rte_hash` on the same keys.
fn cfdp_side(log2: u32, keys: &[FlowKey], fill: usize, burst: usize) -> Side {
    let (t, _) = table(log2, true, 95);
    for k in &keys[..fill] {
        establish(&t, k);
    }
    let mut ns = Vec::with_capacity(burst);
    let mut failed = 0;
    for k in &keys[fill..fill + burst] {
        let s = Instant::now();
        let r = t.open(k, SYN, 1, TRACKED, 60, 1);
        ns.push(s.elapsed().as_nanos() as u64);
        failed += usize::from(r.is_err());
    }
    ns.sort_unstable();
    // The answers of the established connections, in a scattered order
    // (the harness's stride): traffic does not come in opening order.
    assert_ne!(fill as u64 % STRIDE, 0);
    let answers: Vec<FlowKey> = (0..fill as u64)
        .map(|i| keys[(i * STRIDE % fill as u64) as usize].reply())
        .collect();
    let s = Instant::now();
    let found = answers
        .iter()
        .filter(|k| t.lookup(k, ACK, 60, 2).is_some())
        .count();
    let single = fill as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(found, fill, "an established connection was not found");
    let mut probes = [cfdp_conntrack::table::Probe::default(); 32];
    let s = Instant::now();
    let mut bulk_found = 0;
    for ks in answers.chunks_exact(32) {
        t.probe(ks, &mut probes);
        for (k, p) in ks.iter().zip(&probes) {
            bulk_found += usize::from(t.lookup_probed(k, p, ACK, 60, 2).is_some());
        }
    }
    let bulk = (fill / 32 * 32) as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(bulk_found, fill / 32 * 32);
    let strangers = &keys[fill + burst..];
    let s = Instant::now();
    let strays = strangers
        .iter()
        .filter(|k| t.lookup(k, ACK, 60, 2).is_some())
        .count();
    let miss = strangers.len() as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(strays, 0);
    Side {
        p50: percentile(&ns, 0.5) as f64,
        p99: percentile(&ns, 0.99) as f64,
        p999: percentile(&ns, 0.999) as f64,
        max: *ns.last().unwrap() as f64,
        failed: failed as f64,
        single,
        bulk,
        miss,
        pages: if anon_huge_kb() >= 2048 { "2M" } else { "4K" },
    }
}

/// The process's anonymous memory on transparent huge pages, in kB (0
/// where the kernel does not say).
fn anon_huge_kb() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("AnonHugePages:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `rte_hash` on the same keys: the C harness (`bench/conntrack-rte-hash/`)
/// run as a child, its one line of figures read back.
fn rte_hash_side(harness: &str, file: &std::path::Path, sizes: [usize; 4]) -> Side {
    let [cap, fill, burst, strangers] = sizes;
    let out = std::process::Command::new(harness)
        .arg(file)
        .args([38, cap, fill, burst, strangers].map(|x| x.to_string()))
        .output()
        .expect("run the rte_hash harness");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "harness failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let pages = match text.lines().find_map(|l| l.strip_prefix("pages ")) {
        Some("2M") => "2M",
        Some("4K") => "4K",
        other => panic!("the harness did not say its pages: {other:?}"),
    };
    let line = text.lines().last().expect("a line of figures");
    let v: Vec<f64> = line
        .split(',')
        .map(|x| x.trim().parse().expect("a number"))
        .collect();
    assert_eq!(v.len(), 11, "{line}");
    assert_eq!(v[8] as usize, fill, "rte_hash did not find every key");
    assert_eq!(v[10], 0.0, "rte_hash found a stranger");
    Side {
        p50: v[0],
        p99: v[1],
        p999: v[2],
        max: v[3],
        failed: v[4],
        single: v[5],
        bulk: v[6],
        miss: v[7],
        pages,
    }
}

/// cfdp's connection table beside DPDK's `rte_hash` on the same keys and
/// occupancy, rounds alternating (`bench/conntrack-rte-hash.sh`).
fn side_by_side(harness: &str, log2: u32, rounds: usize) {
    let slots = 4usize << log2;
    let (fill, cap) = (slots * 85 / 100, slots * 95 / 100);
    let burst = cap - fill;
    let strangers = 200_000;
    let keys: Vec<FlowKey> = (0..fill as u32)
        .map(|i| conn(i, false))
        .chain((0..(burst + strangers) as u32).map(|i| conn(i, true)))
        .collect();
    // The keys as rte_hash gets them: the canonical connection key's 38
    // bytes (both directions' packets make the same), built for it.
    let mut bytes = Vec::with_capacity(keys.len() * 38);
    for k in &keys {
        bytes.extend_from_slice(&cfdp_conntrack::ConnKey::of(k).0.bytes());
    }
    let file = std::env::temp_dir().join(format!("cfdp-conntrack-keys-{}", std::process::id()));
    std::fs::write(&file, &bytes).expect("write the keys");
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..rounds {
        ours.push(cfdp_side(log2, &keys, fill, burst));
        theirs.push(rte_hash_side(harness, &file, [cap, fill, burst, strangers]));
    }
    let _ = std::fs::remove_file(&file);
    let med = |v: &[Side], f: fn(&Side) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        median(&mut x)
    };
    println!(
        "{fill} established connections, {burst} opened as a burst (to 95 % of {slots} slots), {strangers} strangers; median of {rounds} rounds ({})",
        machine_description()
    );
    println!(
        "{:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>7} {:>10} {:>10} {:>10}",
        "impl",
        "pages",
        "p50_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "failed",
        "single_M/s",
        "bulk_M/s",
        "miss_M/s"
    );
    let mut rows = Vec::new();
    for (name, v) in [("cfdp", &ours), ("rte_hash", &theirs)] {
        let f = [
            med(v, |s| s.p50),
            med(v, |s| s.p99),
            med(v, |s| s.p999),
            med(v, |s| s.max),
            med(v, |s| s.failed),
            med(v, |s| s.single),
            med(v, |s| s.bulk),
            med(v, |s| s.miss),
        ];
        println!(
            "{name:<10} {:>5} {:>8.0} {:>8.0} {:>8.0} {:>9.0} {:>7.0} {:>10.2} {:>10.2} {:>10.2}",
            v[0].pages, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
        );
        rows.push(format!(
            "{name},{},{slots},{fill},{burst},{strangers},{:.0},{:.0},{:.0},{:.0},{:.0},{:.3},{:.3},{:.3}",
            v[0].pages, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
        ));
    }
    let path = results_path("conntrack_rte_hash.csv");
    write_csv(
        &path,
        "impl,pages,slots,established,burst,strangers,insert_p50_ns,insert_p99_ns,insert_p999_ns,insert_max_ns,failed,lookup_mops,lookup_bulk_mops,stranger_mops",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}
