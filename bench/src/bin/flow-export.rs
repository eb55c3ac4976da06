//! What flow export (IPFIX) costs the worker: one worker over 64-byte
//! UDP frames from memory, export off and on (`cfdp-export`'s flow cache
//! in the worker, the exporter's thread sending to a local UDP socket
//! nobody reads), rounds alternating, medians:
//!
//! - `hit`: 1,024 flows, every packet's record already in the cache (one
//!   allow-all rule);
//! - `miss`: 1 M flows (quick: 2^18) in turn, every packet a new record
//!   in a full cache of 65,536 (each new flow finishes the oldest record
//!   of its set early: the worst case; one allow-all rule);
//! - `conversations`: 4,096 UDP conversations, each request followed by
//!   its answer, through a stateful rule (connections tracked): two flows
//!   a conversation, one biflow record.
//!
//! Export on four ways: every packet, 1 in [`SAMPLING`] packets
//! (`[ipfix] sampling`: a packet not taken skips the cache), every packet
//! into biflow records (`[ipfix] biflow`: a connection's answers counted
//! in its initiator's record), and every packet with each record naming
//! its rule (`[ipfix] rule_pen`: the rule found when a packet starts a
//! record — an answer's by its connection). And each cache's bytes a record
//! when full (its table, allocated at the start, over its capacity) and
//! the records it held. Output: a table,
//! `bench/results/flow_export.csv`. Run: `cargo run --release -p
//! cfdp-bench --bin flow-export [-- --quick]`.
#![forbid(unsafe_code)]

use std::net::UdpSocket;
use std::time::Instant;

use cfdp_bench::{
    bench_flow, is_quick, machine_description, median, results_path, udp_frame, write_csv,
};
use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_control::RuleStore;
use cfdp_engine::export::FlowExport;
use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
use cfdp_export::{CacheSettings, Exporter};
use cfdp_rules::HashSecret;

/// The sampled variant's rate: 1 in this many packets.
const SAMPLING: u32 = 100;

/// The export variants, measured in this order each round.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Off,
    On,
    Sampled,
    Biflow,
    Rules,
}

const VARIANTS: [Variant; 5] = [
    Variant::Off,
    Variant::On,
    Variant::Sampled,
    Variant::Biflow,
    Variant::Rules,
];

/// A workload: its frames and the rules (and connection table) they meet.
struct Workload {
    name: &'static str,
    frames: Vec<Vec<u8>>,
    cx: cfdp_engine::WorkerContext,
    /// Keeps the rules' tables alive.
    _store: RuleStore,
}

fn workloads(many: u64) -> [Workload; 3] {
    let allow_all = || {
        let rules = cfdp_rules::parse_rule_file(
            r#"{"rules": [{"id": 1, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "allow"}]}"#,
        )
        .expect("the bench's rule");
        RuleStore::fixed(&rules[..], Mode::Verify, 1).expect("rules load")
    };
    let stateful = || {
        let rules = cfdp_rules::parse_rule_file(
            r#"{"rules": [
              {"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "proto": "udp"}, "action": "allow", "track": true},
              {"id": 2, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}"#,
        )
        .expect("the bench's rules");
        let table = ConnTable::new(1 << 16, Timeouts::default(), HashSecret::from_seed(3))
            .expect("connection table");
        RuleStore::fixed_tracked(
            &rules[..],
            Mode::Verify,
            1,
            Some(std::sync::Arc::new(table)),
        )
        .expect("rules load")
    };
    let workload = |name, frames, (store, cx): (RuleStore, _)| Workload {
        name,
        frames,
        cx,
        _store: store,
    };
    [
        workload(
            "hit",
            (0..1024).map(|i| udp_frame(&bench_flow(i))).collect(),
            allow_all(),
        ),
        workload(
            "miss",
            (0..many).map(|i| udp_frame(&bench_flow(i))).collect(),
            allow_all(),
        ),
        workload(
            "conversations",
            (0..2 * CONVERSATIONS)
                .map(|i| {
                    let k = bench_flow(i / 2);
                    udp_frame(&if i % 2 == 0 { k } else { k.reply() })
                })
                .collect(),
            stateful(),
        ),
    ]
}

/// The `conversations` workload's conversations.
const CONVERSATIONS: u64 = 4096;

fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let rounds = if quick { 3 } else { 7 };
    let many: u64 = if quick { 1 << 18 } else { 1 << 20 };
    let seconds = if quick { 0.3 } else { 1.0 };
    // A collector nobody reads: the kernel drops what its buffer cannot
    // hold, as a slow collector would.
    let sink = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    let exporter = Exporter::start(vec![sink.local_addr().expect("its address")], 0)
        .expect("start the exporter");
    println!("machine: {}", machine_description());
    println!("one worker, 64-byte UDP frames from memory, median of {rounds}");
    let mut rows = Vec::new();
    for w in &workloads(many) {
        let (mut mpps, footprint) = measure(&w.cx, &exporter, &w.frames, rounds, seconds);
        let [off, on, sampled, biflow, rules] = mpps.each_mut().map(|m| median(m));
        // The table is allocated whole: its bytes over the records it
        // holds when full (a cache holding fewer costs the same).
        let capacity = CacheSettings::default().capacity as f64;
        let bytes = footprint.map(|f| f.1 as f64 / capacity);
        let name = w.name;
        println!(
            "  {name:<13} {} frames: off {off:6.2} Mpps, on {on:6.2} ({:.3}×), 1 in {SAMPLING} {sampled:6.2} ({:.3}×), biflow {biflow:6.2} ({:.3}×), rules named {rules:6.2} ({:.3}×); records {} / {} biflow, {:.0} / {:.0} bytes a record",
            w.frames.len(),
            on / off,
            sampled / off,
            biflow / off,
            rules / off,
            footprint[0].0,
            footprint[1].0,
            bytes[0],
            bytes[1],
        );
        rows.push(format!(
            "{name},{},{off:.3},{on:.3},{:.3},{SAMPLING},{sampled:.3},{:.3},{},{:.1},{biflow:.3},{:.3},{},{:.1},{rules:.3},{:.3}",
            w.frames.len(),
            on / off,
            sampled / off,
            footprint[0].0,
            bytes[0],
            biflow / off,
            footprint[1].0,
            bytes[1],
            rules / off,
        ));
    }
    let c = exporter.finish();
    println!(
        "exporter: {} records sent, {} lost to a full queue",
        c.records.load(std::sync::atomic::Ordering::Relaxed),
        c.queue_full.load(std::sync::atomic::Ordering::Relaxed)
    );
    let path = results_path("flow_export.csv");
    write_csv(
        &path,
        "workload,frames,off_mpps,on_mpps,on_vs_off,sampling,sampled_mpps,sampled_vs_off,cached_flows,cache_bytes_per_flow,biflow_mpps,biflow_vs_off,biflow_records,biflow_bytes_per_record,rules_mpps,rules_vs_off",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// One worker over `frames`, each of [`VARIANTS`] in turn for `rounds`:
/// each variant's rates (Mpps), and the largest cache footprint seen
/// (records, table bytes) of export on, every packet, uniflow and biflow.
fn measure(
    cx: &cfdp_engine::WorkerContext,
    exporter: &Exporter,
    frames: &[Vec<u8>],
    rounds: usize,
    seconds: f64,
) -> ([Vec<f64>; 5], [(usize, usize); 2]) {
    let mut mpps: [Vec<f64>; 5] = Default::default();
    let mut footprint = [(0, 0); 2];
    for _ in 0..rounds {
        for (v, m) in VARIANTS.iter().zip(mpps.iter_mut()) {
            let opts = WorkerOptions {
                export: (*v != Variant::Off).then(|| FlowExport {
                    cache: CacheSettings {
                        biflow: *v == Variant::Biflow,
                        rules: *v == Variant::Rules,
                        ..CacheSettings::default()
                    },
                    sender: exporter.sender(),
                    clock_base_ns: 0,
                    sampling: if *v == Variant::Sampled { SAMPLING } else { 1 },
                }),
                ..WorkerOptions::default()
            };
            let mut worker = Worker::new(cx, 0, opts);
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(frames, Limit::Seconds(seconds));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut worker, &tables).packets;
            m.push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            let at = match v {
                Variant::On => 0,
                Variant::Biflow => 1,
                _ => continue,
            };
            if let Some(f) = worker.export_footprint() {
                footprint[at] = footprint[at].max(f);
            }
        }
    }
    (mpps, footprint)
}
