//! The worker path on the simplest rule sets, where the data plane's own
//! cost shows: one worker (`cfdp_engine::run_worker`, the loop every
//! backend runs) over 64-byte IPv4/UDP frames from memory
//! (`MemoryBackend`: no NIC, so the rate is the worker's alone), for
//!
//! - `allow-all`: one rule matching everything (`src_prefix 0.0.0.0/0`
//!   with a priority: a multi-field rule), allow;
//! - `prefixes`: eight destination-prefix rules and a catch-all drop
//!   (the frames hit the prefixes and the catch-all half and half);
//! - `flows-1k`: 1,000 exact-flow rules, 1 % of the frames matching;
//! - `udp-stateful`: 4,096 UDP conversations from 10/8, each request
//!   followed by its answer, through a stateful rule ("allow + track"
//!   for 10/8, a catch-all drop) and a connection table: after the
//!   first pass every frame is an established connection's (the
//!   stateful row of the worker-path issue: ≥ 0.9× the stateless rate,
//!   read against both `allow-all` and `udp-stateless`);
//! - `udp-stateless`: the same frames through the stateless rules an
//!   operator without connection tracking writes for them (allow UDP
//!   from 10/8, allow UDP to 10/8, a catch-all drop): the like-for-like
//!   stateless rate of `udp-stateful`;
//! - each ClassBench set in `CLASSBENCH_SETS` (default `acl1_10k`) found
//!   in `CLASSBENCH` (default `../shared/classbench`; skipped, and said,
//!   when absent): the set allowing, its trace's frames, and beside it the
//!   classifier alone (`classify_burst` over the trace's keys in bursts
//!   of 32, as the `classbench` bench's batched rate) in the same rounds:
//!   the issue's "worker within 15 % of the classifier's batched rate";
//! - `udp-stateful-nic-csum`: `udp-stateful`'s frames as a NIC with receive
//!   checksum offload hands them over (`MemoryBackend::nic_checked`):
//!   connection tracking does not sum the UDP checksums again.
//!
//! Rounds alternate between the workloads; medians. With `--passes N` a
//! fixed amount of work (N passes over the frames) for `callgrind`'s
//! instruction counts (results to `results/quick/`).
//!
//! Output: a table, `bench/results/worker_path.csv`
//! (`workload,rules,mpps,ns_per_packet`). Run: `cargo run --release -p
//! cfdp-bench --bin worker-path [-- --quick]`.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use cfdp_bench::{
    arg_u64_list, bench_flow, is_quick, machine_description, median, results_path,
    side_results_path, udp_frame, write_csv, SplitMix,
};
use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_control::RuleStore;
use cfdp_engine::acl::AclClassifier;
use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
use cfdp_rules::{AclRule, Action, FlowKey, HashSecret, Match, Rule};

/// A workload: its name, its rules, its frames, whether its rules track
/// connections (a connection table of their own), and for a ClassBench
/// set its rules as the classifier takes them (for the classifier alone).
struct Workload {
    name: &'static str,
    rules: Vec<Rule>,
    frames: Vec<Vec<u8>>,
    tracked: bool,
    acl: Vec<AclRule>,
    /// The frames come with the NIC's checksum verdict.
    nic_checked: bool,
}

fn parse(text: &str) -> Vec<Rule> {
    cfdp_rules::parse_rule_file(text).expect("the bench's rules parse")
}

fn workloads(pool: usize) -> Vec<Workload> {
    let mut rng = SplitMix::new(7);
    let mut frames = |f: &mut dyn FnMut(u64) -> cfdp_rules::FlowKey| {
        (0..pool)
            .map(|_| udp_frame(&f(rng.next())))
            .collect::<Vec<_>>()
    };
    let allow_all = Workload {
        name: "allow-all",
        rules: parse(
            r#"{"rules": [{"id": 1, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "allow"}]}"#,
        ),
        frames: frames(&mut |r| bench_flow(r % (1 << 30))),
        tracked: false,
        acl: Vec::new(),
        nic_checked: false,
    };
    // Eight /16s of 10.0.0.0/8 allowed and the rest dropped: half the
    // frames go to one of the eight (bench_flow's sources are 10/8; the
    // destination is set here).
    let prefixes = Workload {
        name: "prefixes",
        rules: parse(&format!(
            r#"{{"rules": [{}, {{"id": 99, "priority": 1, "match": {{"src_prefix": "0.0.0.0/0"}}, "action": "drop"}}]}}"#,
            (0..8)
                .map(|i| format!(
                    r#"{{"id": {}, "priority": 10, "match": {{"dst_prefix": "172.{i}.0.0/16"}}, "action": "allow"}}"#,
                    i + 1
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        frames: frames(&mut |r| {
            let mut k = bench_flow(r % (1 << 30));
            let hit = r >> 40 & 1 == 0;
            k.dst[..4].copy_from_slice(&if hit {
                [172, (r >> 48) as u8 & 7, 1, 1]
            } else {
                [192, 0, 2, 1]
            });
            k
        }),
        tracked: false,
        acl: Vec::new(),
        nic_checked: false,
    };
    let n = 1000;
    let flows = Workload {
        name: "flows-1k",
        rules: (0..n)
            .map(|i| Rule {
                id: i as u32,
                matcher: Match::Flow(
                    cfdp_rules::ExactFlow::of_key(bench_flow(i)).expect("a valid flow"),
                ),
                action: Action::Allow,
            })
            .collect(),
        frames: frames(&mut |r| {
            if r % 100 == 0 {
                bench_flow((r >> 8) % n)
            } else {
                bench_flow(n + (r >> 8) % (1 << 30))
            }
        }),
        tracked: false,
        acl: Vec::new(),
        nic_checked: false,
    };
    let mut all = vec![allow_all, prefixes, flows];
    all.extend(stateful(pool));
    all.extend(classbench_sets());
    all
}

/// `udp-stateful` and `udp-stateful-nic-csum` (see the module docs).
fn stateful(pool: usize) -> [Workload; 3] {
    // Each conversation's request (from 10/8) and then its answer.
    let conversations = 4096;
    let stateful = Workload {
        name: "udp-stateful",
        rules: parse(
            r#"{"rules": [
              {"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "proto": "udp"}, "action": "allow", "track": true},
              {"id": 2, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}"#,
        ),
        frames: (0..pool as u64)
            .map(|i| {
                let k = bench_flow((i / 2) % conversations);
                udp_frame(&if i % 2 == 0 { k } else { k.reply() })
            })
            .collect(),
        tracked: true,
        acl: Vec::new(),
        nic_checked: false,
    };
    let offloaded = Workload {
        name: "udp-stateful-nic-csum",
        rules: stateful.rules.clone(),
        frames: stateful.frames.clone(),
        tracked: true,
        acl: Vec::new(),
        nic_checked: true,
    };
    let stateless = Workload {
        name: "udp-stateless",
        rules: parse(
            r#"{"rules": [
              {"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "proto": "udp"}, "action": "allow"},
              {"id": 3, "priority": 10, "match": {"dst_prefix": "10.0.0.0/8", "proto": "udp"}, "action": "allow"},
              {"id": 2, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}"#,
        ),
        frames: stateful.frames.clone(),
        tracked: false,
        acl: Vec::new(),
        nic_checked: false,
    };
    [stateful, offloaded, stateless]
}

/// The ClassBench workloads (see the module docs): rules allowing, the
/// trace's frames (`cfdp_testkit::trace::frame`, 64 bytes).
fn classbench_sets() -> Vec<Workload> {
    let dir = std::env::var("CLASSBENCH").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/classbench"),
        PathBuf::from,
    );
    let sets = std::env::var("CLASSBENCH_SETS").unwrap_or_else(|_| "acl1_10k".into());
    let mut out = Vec::new();
    for set in sets.split_whitespace() {
        let (Ok(rules), Ok(trace)) = (
            std::fs::read_to_string(dir.join(set)),
            std::fs::read_to_string(dir.join(format!("{set}_trace"))),
        ) else {
            println!("worker-path: {set} not found in {}: skipped", dir.display());
            continue;
        };
        let import = cfdp_rules::classbench::parse_rules(&rules, Action::Allow)
            .unwrap_or_else(|e| panic!("{set}: {e}"));
        let trace = cfdp_rules::classbench::parse_trace(&trace)
            .unwrap_or_else(|e| panic!("{set}_trace: {e}"));
        out.push(Workload {
            name: Box::leak(set.to_string().into_boxed_str()),
            rules: import.rules.iter().map(AclRule::to_rule).collect(),
            frames: trace
                .iter()
                .filter_map(|p| cfdp_testkit::trace::frame(&p.key))
                .collect(),
            tracked: false,
            acl: import.rules,
            nic_checked: false,
        });
    }
    out
}

/// The classifier alone over workload `w`'s frames (`None` for a
/// workload that is not a ClassBench set): the classifier and the frames'
/// keys, decoded once, before timing.
fn classifier_of(w: &Workload) -> Option<(AclClassifier, Vec<FlowKey>)> {
    if w.acl.is_empty() {
        return None;
    }
    // Compiled, as the rule store builds it for the worker (and as the
    // `classbench` bench measures it).
    let mut c = AclClassifier::with_rules(&w.acl).expect("ClassBench ids are unique");
    if let Err(e) = c.compile() {
        println!("worker-path: {}: the compiled layer refused ({e}): the classifier alone runs without it, as the worker does", w.name);
    }
    let keys: Vec<FlowKey> = w
        .frames
        .iter()
        .filter_map(
            |f| match cfdp_packet::decode(cfdp_packet::LinkType::Ethernet, f) {
                cfdp_packet::Decoded::Ip(ip) => Some(ip.key),
                _ => None,
            },
        )
        .collect();
    Some((c, keys))
}

/// Million packets a second through `c.classify_burst`, bursts of 32.
fn classify_rate(c: &AclClassifier, keys: &[FlowKey]) -> f64 {
    let mut out = [None; 32];
    let t = Instant::now();
    for burst in keys.chunks(32) {
        c.classify_burst(burst, &mut out[..burst.len()]);
        std::hint::black_box(&out);
    }
    keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6
}

fn main() {
    cfdp_bench::expect_flags(&["--only", "--passes"]);
    let quick = is_quick();
    let passes: Option<u64> = arg_u64_list("--passes").and_then(|v| v.first().copied());
    let pool = if quick || passes.is_some() {
        1 << 16
    } else {
        1 << 18
    };
    let rounds = match (quick, passes) {
        (_, Some(_)) => 1,
        (true, None) => 3,
        (false, None) => 7,
    };
    let limit = || match passes {
        Some(p) => Limit::Passes(p),
        None => Limit::Seconds(if quick { 0.2 } else { 0.6 }),
    };
    // `--only NAME`: one workload (for a profiler).
    let only = cfdp_bench::arg("--only");
    let loads: Vec<Workload> = workloads(pool)
        .into_iter()
        .filter(|w| only.as_deref().is_none_or(|o| o == w.name))
        .collect();
    let stores: Vec<_> = loads
        .iter()
        .map(|w| {
            let table = w.tracked.then(|| {
                let t = ConnTable::new(1 << 16, Timeouts::default(), HashSecret::from_seed(3));
                std::sync::Arc::new(t.expect("connection table"))
            });
            RuleStore::fixed_tracked(&w.rules[..], Mode::Verify, 1, table).expect("rules load")
        })
        .collect();
    // The classifier alone beside each ClassBench set (not under
    // `--passes`: instruction counts are of the worker).
    let alone: Vec<_> = loads
        .iter()
        .map(|w| passes.is_none().then(|| classifier_of(w)).flatten())
        .collect();
    println!("machine: {}", machine_description());
    println!("one worker, 64-byte frames from memory, median of {rounds} rounds");
    let mut mpps = vec![Vec::new(); loads.len()];
    let mut alone_mpps = vec![Vec::new(); loads.len()];
    for _ in 0..rounds {
        for (i, (w, (_store, cx))) in loads.iter().zip(&stores).enumerate() {
            let mut worker = Worker::new(cx, 0, WorkerOptions::default());
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(&w.frames, limit());
            if w.nic_checked {
                backend = backend.nic_checked();
            }
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut worker, &tables).packets;
            mpps[i].push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            if let Some((c, keys)) = &alone[i] {
                alone_mpps[i].push(classify_rate(c, keys));
            }
        }
    }
    let rows = report(&loads, &mut mpps, &mut alone_mpps);
    let path = if passes.is_some() {
        side_results_path("worker_path.csv")
    } else {
        results_path("worker_path.csv")
    };
    write_csv(&path, "workload,rules,mpps,ns_per_packet", &rows).expect("write CSV");
    println!("wrote {}", path.display());
}

/// The table printed and the CSV rows: each workload's median rate, then
/// the classifier alone beside the ClassBench sets.
fn report(loads: &[Workload], mpps: &mut [Vec<f64>], alone_mpps: &mut [Vec<f64>]) -> Vec<String> {
    let mut rows = Vec::new();
    for (w, m) in loads.iter().zip(mpps) {
        let m = median(m);
        println!(
            "  {:<10} {:>6} rules {m:>7.2} Mpps {:>6.1} ns/packet",
            w.name,
            w.rules.len(),
            1e3 / m
        );
        rows.push(format!(
            "{},{},{m:.3},{:.1}",
            w.name,
            w.rules.len(),
            1e3 / m
        ));
    }
    for (w, a) in loads.iter().zip(alone_mpps) {
        if a.is_empty() {
            continue;
        }
        let a = median(a);
        let name = format!("{} (classifier alone)", w.name);
        println!(
            "  {name:<10} {:>6} rules {a:>7.2} Mpps {:>6.1} ns/packet",
            w.rules.len(),
            1e3 / a
        );
        rows.push(format!("{name},{},{a:.3},{:.1}", w.rules.len(), 1e3 / a));
    }
    rows
}
