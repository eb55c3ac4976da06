//! What flow export (IPFIX) costs the worker: one worker over 64-byte
//! UDP frames from memory with one allow-all rule, export off and on
//! (`cfdp-export`'s flow cache in the worker, the exporter's thread
//! sending to a local UDP socket nobody reads), rounds alternating,
//! medians:
//!
//! - `hit`: 1,024 flows, every packet's record already in the cache;
//! - `miss`: 1 M flows (quick: 2^18) in turn, every packet a new record
//!   in a full cache of 65,536 (each new flow finishes the oldest record
//!   of its set early: the worst case).
//!
//! Export on twice: every packet, and 1 in [`SAMPLING`] packets
//! (`[ipfix] sampling`: a packet not taken skips the cache). And the
//! cache's bytes a flow when full (its table, allocated at the start,
//! over its capacity). Output: a table,
//! `bench/results/flow_export.csv`. Run: `cargo run --release -p
//! cfdp-bench --bin flow-export [-- --quick]`.
#![forbid(unsafe_code)]

use std::net::UdpSocket;
use std::time::Instant;

use cfdp_bench::{
    bench_flow, is_quick, machine_description, median, results_path, udp_frame, write_csv,
};
use cfdp_control::RuleStore;
use cfdp_engine::export::FlowExport;
use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
use cfdp_export::{CacheSettings, Exporter};

/// The sampled variant's rate: 1 in this many packets.
const SAMPLING: u32 = 100;

fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = is_quick();
    let rounds = if quick { 3 } else { 7 };
    let many: u64 = if quick { 1 << 18 } else { 1 << 20 };
    let seconds = if quick { 0.3 } else { 1.0 };
    let rules = cfdp_rules::parse_rule_file(
        r#"{"rules": [{"id": 1, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "allow"}]}"#,
    )
    .expect("the bench's rule");
    let (_store, cx) = RuleStore::fixed(&rules[..], Mode::Verify, 1).expect("rules load");
    let workloads: [(&str, Vec<Vec<u8>>); 2] = [
        (
            "hit",
            (0..1024).map(|i| udp_frame(&bench_flow(i))).collect(),
        ),
        (
            "miss",
            (0..many).map(|i| udp_frame(&bench_flow(i))).collect(),
        ),
    ];
    // A collector nobody reads: the kernel drops what its buffer cannot
    // hold, as a slow collector would.
    let sink = UdpSocket::bind("127.0.0.1:0").expect("a local socket");
    let exporter = Exporter::start(vec![sink.local_addr().expect("its address")], 0)
        .expect("start the exporter");
    println!("machine: {}", machine_description());
    println!("one worker, 64-byte UDP frames from memory, one allow-all rule, median of {rounds}");
    let mut rows = Vec::new();
    for (name, frames) in &workloads {
        let (mut mpps, footprint) = measure(&cx, &exporter, frames, rounds, seconds);
        let off = median(&mut mpps[0]);
        let on = median(&mut mpps[1]);
        let sampled = median(&mut mpps[2]);
        // The table is allocated whole: its bytes over the flows it holds
        // when full (a cache holding fewer flows costs the same).
        let per_flow = footprint.1 as f64 / CacheSettings::default().capacity as f64;
        println!(
            "  {name:<5} {} flows: off {off:6.2} Mpps, on {on:6.2} Mpps ({:.3}×), 1 in {SAMPLING} {sampled:6.2} Mpps ({:.3}×); cache {} flows, {per_flow:.0} bytes a flow",
            frames.len(),
            on / off,
            sampled / off,
            footprint.0
        );
        rows.push(format!(
            "{name},{},{off:.3},{on:.3},{:.3},{SAMPLING},{sampled:.3},{:.3},{},{per_flow:.1}",
            frames.len(),
            on / off,
            sampled / off,
            footprint.0
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
        "workload,flows,off_mpps,on_mpps,on_vs_off,sampling,sampled_mpps,sampled_vs_off,cached_flows,cache_bytes_per_flow",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// One worker over `frames`, export off, on for every packet and on for 1
/// in [`SAMPLING`], alternated for `rounds`: each variant's rates (Mpps),
/// and the largest cache footprint seen (flows, table bytes).
fn measure(
    cx: &cfdp_engine::WorkerContext,
    exporter: &Exporter,
    frames: &[Vec<u8>],
    rounds: usize,
    seconds: f64,
) -> ([Vec<f64>; 3], (usize, usize)) {
    let mut mpps = [Vec::new(), Vec::new(), Vec::new()];
    let mut footprint = (0, 0);
    for _ in 0..rounds {
        for (on, m) in mpps.iter_mut().enumerate() {
            let opts = WorkerOptions {
                export: (on > 0).then(|| FlowExport {
                    cache: CacheSettings::default(),
                    sender: exporter.sender(),
                    clock_base_ns: 0,
                    sampling: if on == 2 { SAMPLING } else { 1 },
                }),
                ..WorkerOptions::default()
            };
            let mut worker = Worker::new(cx, 0, opts);
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(frames, Limit::Seconds(seconds));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut worker, &tables).packets;
            m.push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            if let Some(f) = worker.export_footprint() {
                footprint = footprint.max(f);
            }
        }
    }
    (mpps, footprint)
}
