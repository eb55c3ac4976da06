//! ClassBench on cfdp's multi-field classifier (`cfdp_engine::acl`).
//!
//! Reads a ClassBench filter set (line order = priority, first match wins)
//! and a header trace, builds the classifier, and prints one JSON line:
//! `rules`, `tables`, `build_s`, `bytes`, `mpps_single` (one `classify` call
//! per packet), `mpps_batched` (`classify_burst` over bursts of 32),
//! `tables_probed_per_packet`, and one-rule updates into the full set —
//! `insert_us_p50`, `insert_us_p99`, `delete_us_p99` — each a rule of the set
//! deleted and inserted back, timed one by one. The updates are the
//! classifier's alone (`update_path: "classifier"`): the rule store's
//! publication to workers is not in them yet. Rates are medians of
//! `--rounds` passes over the trace (default 5).
//!
//! `--verdicts OUT` writes one line per trace packet: the 1-based line of
//! its first matching rule, 0 for none — what `dpdk-test-acl --verbose=2`
//! reports, so `bench/classbench.sh` can compare the two.
//!
//! Run: `cargo run --release -p cfdp-bench --bin classbench -- --rules FILE
//! --trace FILE [--verdicts OUT] [--rounds N]`

use std::io::Write;
use std::time::Instant;

use cfdp_bench::{arg, median};
use cfdp_engine::acl::{AclClassifier, Probes};
use cfdp_rules::acl::classbench::{parse_rules, parse_trace};
use cfdp_rules::{Action, FlowKey};
use hdrhistogram::Histogram;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("classbench: {path}: {e}");
        std::process::exit(2)
    })
}

fn main() {
    if std::env::args().any(|a| a == "--run-header") {
        // The provenance line bench/classbench.sh puts first in its CSV.
        println!("{}", cfdp_bench::run_header());
        return;
    }
    let (Some(rules_path), Some(trace_path)) = (arg("--rules"), arg("--trace")) else {
        eprintln!("usage: classbench --rules FILE --trace FILE [--verdicts OUT] [--rounds N]");
        std::process::exit(2)
    };
    let rounds: usize = arg("--rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(1);
    let imported = parse_rules(&read(&rules_path), Action::Drop).unwrap_or_else(|e| {
        eprintln!("classbench: {rules_path}: {e}");
        std::process::exit(2)
    });
    let trace = parse_trace(&read(&trace_path)).unwrap_or_else(|e| {
        eprintln!("classbench: {trace_path}: {e}");
        std::process::exit(2)
    });
    let keys: Vec<FlowKey> = trace.iter().map(|p| p.key).collect();
    let rules = &imported.rules;

    let t0 = Instant::now();
    let mut c = AclClassifier::with_rules(rules).expect("ClassBench ids are unique");
    let build_s = t0.elapsed().as_secs_f64();

    if std::env::args().any(|a| a == "--tables") {
        for (t, rules, buckets, longest) in c.table_shapes() {
            eprintln!(
                "table v6={} src/{} dst/{}: {rules} rules, {buckets} buckets, longest {longest}",
                t.v6, t.src_len, t.dst_len
            );
        }
    }
    if let Some(out) = arg("--verdicts") {
        write_verdicts(&out, &c, &keys);
    }
    let mut probes = Probes::default();
    for k in &keys {
        c.classify_counted(k, &mut probes);
    }
    let (single, batched) = rates(&c, &keys, rounds);
    let (ins, del) = updates(&mut c, rules);
    let line = serde_json::json!({
        "rules": rules.len(),
        "tcp_flags_ignored": imported.flags_ignored,
        "packets": keys.len(),
        "tables": c.tables(),
        "build_s": build_s,
        "bytes": c.bytes(),
        "mpps_single": single,
        "mpps_batched": batched,
        "tables_probed_per_packet": probes.tables as f64 / probes.packets.max(1) as f64,
        "insert_us_p50": ins.value_at_quantile(0.5) as f64 / 1e3,
        "insert_us_p99": ins.value_at_quantile(0.99) as f64 / 1e3,
        "delete_us_p50": del.value_at_quantile(0.5) as f64 / 1e3,
        "delete_us_p99": del.value_at_quantile(0.99) as f64 / 1e3,
        "update_path": "classifier",
        "rounds": rounds,
    });
    println!("{line}");
}

/// One line per packet: the winning rule's line (its id), 0 for none.
fn write_verdicts(path: &str, c: &AclClassifier, keys: &[FlowKey]) {
    let f = std::fs::File::create(path).unwrap_or_else(|e| {
        eprintln!("classbench: {path}: {e}");
        std::process::exit(2)
    });
    let mut w = std::io::BufWriter::new(f);
    for k in keys {
        let id = c.classify(k).map_or(0, |r| r.id);
        writeln!(w, "{id}").expect("verdicts write");
    }
    w.flush().expect("verdicts write");
}

/// Median Mpps of `rounds` passes, single-packet and in bursts of 32.
fn rates(c: &AclClassifier, keys: &[FlowKey], rounds: usize) -> (f64, f64) {
    let mut single = Vec::with_capacity(rounds);
    let mut batched = Vec::with_capacity(rounds);
    let mut out = [None; 32];
    for _ in 0..rounds {
        let t = Instant::now();
        let mut hits = 0u64;
        for k in keys {
            hits += u64::from(c.classify(k).is_some());
        }
        single.push(keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
        std::hint::black_box(hits);
        let t = Instant::now();
        for burst in keys.chunks(32) {
            c.classify_burst(burst, &mut out[..burst.len()]);
            std::hint::black_box(&out);
        }
        batched.push(keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    (median(&mut single), median(&mut batched))
}

/// Deletes and re-inserts up to 2000 rules spread over the set, one at a
/// time, timing each (ns).
fn updates(
    c: &mut AclClassifier,
    rules: &[cfdp_rules::AclRule],
) -> (Histogram<u64>, Histogram<u64>) {
    let mut ins = Histogram::new(3).expect("histogram");
    let mut del = Histogram::new(3).expect("histogram");
    let step = (rules.len() / 2000).max(1);
    for r in rules.iter().step_by(step) {
        let t = Instant::now();
        c.remove(r.id).expect("present");
        del.saturating_record(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        c.insert(*r).expect("absent");
        ins.saturating_record(t.elapsed().as_nanos() as u64);
    }
    (ins, del)
}
