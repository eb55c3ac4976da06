//! ClassBench on cfdp's multi-field classifier (`cfdp_engine::acl`).
//!
//! Reads a ClassBench filter set (line order = priority, first match wins)
//! and a header trace and prints one JSON line:
//!
//! * the classifier alone: `tables`, `build_s`, `bytes`, `mpps_single` (one
//!   `classify_id` call a packet), `mpps_batched` (`classify_burst` over
//!   bursts of 32; both answer the winning rule's id from the table's
//!   entry), `tables_probed_per_packet`;
//! * the rule store, as `cfdp run` holds the set: `store_build_s` (bulk
//!   load), `mpps_worker` (the workers' `match_burst` over the published
//!   tables, bursts of 32, verify mode, timed in the same rounds as
//!   `mpps_batched`; `worker_vs_batched`: the median of the rounds' ratios),
//!   and one-rule updates into the full
//!   set through the store with publication, no journal — `insert_us_p50`,
//!   `insert_us_p99`, `delete_us_p50`, `delete_us_p99` (up to 2000 rules of
//!   the set deleted and inserted back, one batch each);
//! * the worst cases: `mpps_miss` (a trace of packets that match no rule:
//!   the trace's packets with their addresses moved outside every rule's
//!   prefixes) and, with `--explosion`, a set built to maximise the shapes
//!   (every pair of source and destination prefix lengths, 33 × 33) under
//!   its own trace (`explosion_tables`, `explosion_mpps`), and with
//!   `--ports` 2,000 rules on one source/destination prefix pair differing
//!   only in (overlapping) destination port ranges and priority, inserted
//!   one at a time in ascending and in descending priority
//!   (`ports_load_asc_s`, `ports_load_desc_s`: the live layer, where such
//!   rules share one bucket), then looked up in bursts as loaded
//!   (`ports_mpps_live`) and compiled (`ports_mpps`);
//! * with `--compile-p99`, the workers' burst latency (`match_burst` over
//!   the published tables, bursts of 32, one thread) with nothing else
//!   running and while full compiles of the set run back to back on
//!   another thread, alternating: `worker_burst_ns_p50/p99/p999_idle`,
//!   `..._compiling`, and `compiles_during` (what the background recompile
//!   costs the workers on a machine with a core to spare).
//!
//! Rates are medians of `--rounds` timings (default 5), each of `--passes`
//! passes over the trace (default 1).
//!
//! `--verdicts OUT` writes one line per trace packet: the 1-based line of
//! its first matching rule, 0 for none — what `dpdk-test-acl --verbose=2`
//! reports, so `bench/classbench.sh` can compare the two.
//!
//! `--rules FILE --make-trace OUT` writes a trace for a set that has none
//! (the sets `bench/classbench-seeds.sh` generates): ten headers a rule,
//! each a random point of the rule's box (a random protocol where it
//! takes any), in ClassBench's trace format with the rule's line last,
//! shuffled; deterministic (a fixed seed).
//!
//! `--v6 AT` moves the set and its trace into IPv6 before anything runs:
//! every address becomes 2001:db8::/32's first `AT` bits followed by the
//! IPv4 address, every prefix `/L` (L > 0) becomes `/(AT+L)`, and `/0` stays
//! `::/0`, so the verdicts are the IPv4 set's (IPv6 prefixes that diverge at
//! bit AT: 32 for sites inside one organisation's /32, 16 for allocations
//! of different organisations).
//!
//! The IPv4 rules are compiled (`compile_s`, `compiled_bytes`, and the
//! tree's nodes, leaf entries and depth as `compiled_shape`) before the
//! rates; a set over the compiled layer's budget is compiled in part where
//! that pays (`compile_left`: the rules its tree leaves in the tuple space,
//! `compile_refused`: why not whole); `--no-compile` leaves them in the
//! tuple space (the A/B).
//! `--churn PCT` then deletes and re-inserts PCT % of the rules with no
//! recompile and measures again (`mpps_single_churned`,
//! `mpps_batched_churned`; `OUT.churned` beside `--verdicts OUT`), then
//! the same under new ids (`*_churned_new_ids`), each round beside the
//! fresh set's bursts (`churned_vs_fresh`, `churned_new_ids_vs_fresh`:
//! the medians of the rounds' ratios).
//!
//! Run: `cargo run --release -p cfdp-bench --bin classbench -- --rules FILE
//! --trace FILE [--verdicts OUT] [--rounds N] [--v6 AT] [--no-compile]
//! [--churn PCT] [--classifier-only] [--kernel NAME]` (`--classifier-only`:
//! stop after the classifier's rates, for A/B runs and profiles;
//! `--kernel portable|avx2|avx512`: the leaf kernel's version, below the
//! CPU's best, as on a CPU without the wider one)

mod measure;
mod v6;
mod worst;

use std::io::Write;
use std::time::Instant;

use cfdp_bench::{arg, load_classbench};
use cfdp_control::RuleStore;
use cfdp_engine::acl::compiled::Layer;
use cfdp_engine::acl::{AclClassifier, Probes};
use cfdp_rules::{
    AclMatch, AclRule, Action, Atomicity, Batch, FlowKey, IpPrefix, PortRange, RuleId, Update,
};

use measure::{rates, rates_with, store_of};
use v6::{to_v6, v6_addr, v6_arg, write_v6_for_dpdk};
use worst::{compile_p99, explosion, ports};

/// `--kernel NAME`: the leaf kernel's version by its name, which this CPU
/// must run (exits with the names it has otherwise).
fn kernel_arg() -> Option<cfdp_engine::acl::Kernel> {
    let name = arg("--kernel")?;
    let have = cfdp_engine::acl::Kernel::available();
    if let Some(k) = have.iter().find(|k| k.name() == name) {
        return Some(*k);
    }
    let names: Vec<&str> = have.iter().map(|k| k.name()).collect();
    eprintln!(
        "classbench: --kernel {name}: this CPU runs {}",
        names.join(", ")
    );
    std::process::exit(2)
}

#[allow(clippy::too_many_lines)] // a benchmark's main
fn main() {
    cfdp_bench::expect_flags(&[
        "--churn",
        "--classifier-only",
        "--compile-p99",
        "--explosion",
        "--kernel",
        "--make-trace",
        "--no-compile",
        "--passes",
        "--ports",
        "--rounds",
        "--rules",
        "--run-header",
        "--tables",
        "--trace",
        "--v6",
        "--verdicts",
        "--write-v6",
    ]);
    if std::env::args().any(|a| a == "--run-header") {
        // The provenance line bench/classbench.sh puts first in its CSV.
        println!("{}", cfdp_bench::run_header());
        return;
    }
    if let (Some(rules_path), Some(out)) = (arg("--rules"), arg("--make-trace")) {
        make_trace(&rules_path, &out);
        return;
    }
    let (Some(rules_path), Some(trace_path)) = (arg("--rules"), arg("--trace")) else {
        eprintln!(
            "usage: classbench --rules FILE --trace FILE [--verdicts OUT] [--rounds N] [--v6 AT]"
        );
        std::process::exit(2)
    };
    let rounds: usize = arg("--rounds")
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(1);
    if let Some(p) = arg("--passes").and_then(|p| p.parse().ok()) {
        measure::set_passes(p);
    }
    let (imported, mut keys) = load_classbench("classbench", &rules_path, &trace_path);
    let mut rules = imported.rules;
    let v6_at = v6_arg();
    if let Some(at) = v6_at {
        to_v6(&mut rules, &mut keys, at);
        if let Some(dir) = arg("--write-v6") {
            // The moved set and trace in dpdk-test-acl's IPv6 formats, so
            // that rte_acl classifies the very same packets (--ipv6).
            write_v6_for_dpdk(&dir, &rules, &keys);
            return;
        }
    }
    let rules = &rules;

    let t0 = Instant::now();
    let mut c = AclClassifier::with_rules(rules).expect("ClassBench ids are unique");
    if let Some(k) = kernel_arg() {
        c = c.with_kernel(k);
    }
    let build_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let refused = if std::env::args().any(|a| a == "--no-compile") {
        Some("--no-compile".to_string())
    } else {
        c.compile().err().map(|e| e.to_string())
    };
    let compile_s = t0.elapsed().as_secs_f64();
    // A tree holds some of the rules (all of them unless `refused` says
    // why not: the `left` ones stay in the tuple space).
    let compiled = c.compiled().is_some();
    let left = c.layers().left;
    // The classifier as built, before any update (`bytes` below is after
    // the update timings, whose rules under new ids may sit in the live
    // layer).
    let bytes_fresh = c.bytes();

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
    let (mut levels, mut scanned) = (0u64, 0u64);
    for k in &keys {
        c.classify_counted(k, &mut probes);
        if let Some((l, s)) = c.compiled_cost(k) {
            levels += u64::from(l);
            scanned += u64::from(s);
        }
    }
    if std::env::args().any(|a| a == "--classifier-only") {
        let (single, batched) = rates(&c, &keys, rounds);
        // The classifier's figures alone (A/B runs, profiles).
        let line = serde_json::json!({
            "rules": rules.len(), "packets": keys.len(), "compiled": compiled,
            "left": left, "compile_s": compile_s, "mpps_single": single, "mpps_batched": batched,
        });
        println!("{line}");
        return;
    }
    // The set as `cfdp run` holds it (bulk load), its workers' matching
    // timed round by round beside the classifier's.
    let t0 = Instant::now();
    let mut store = store_of(rules);
    let store_build_s = t0.elapsed().as_secs_f64();
    let (single, batched, worker) = rates_with(&c, &keys, rounds, Some(&store));
    let (worker, worker_vs_batched) = worker.expect("a store was given");
    // On a copy: the update timings below churn `c` too.
    let churned = arg("--churn").map(|pct| {
        (
            churn(&mut c.clone(), &c, rules, &pct, &keys, rounds, false),
            churn(&mut c.clone(), &c, rules, &pct, &keys, rounds, true),
        )
    });
    let (mut cins, mut cdel) = updates(&mut c, rules);
    // Rules that match every packet (full wildcards: ClassBench sets end
    // with one) leave no packet to miss: the miss trace runs against the
    // set without them.
    let partial: Vec<AclRule> = rules.iter().copied().filter(|r| !matches_all(r)).collect();
    let mut without = AclClassifier::with_rules(&partial).expect("unique ids");
    if compiled {
        // The miss set is the set less its catch-alls: it may be refused.
        let _ = without.compile();
    }
    let miss = miss_trace(&without, &keys, v6_at);
    let (miss_mpps, _) = rates(&without, &miss, rounds);
    let (mut ins, mut del) = store_updates(&mut store, rules);
    // The updates may have started a background recompile: landed before
    // the timings below, so that none runs beside them on the other core.
    while store.finish_compile(true) {}
    drop(store);
    let mut line = serde_json::json!({
        "rules": rules.len(),
        "tcp_flags_ignored": imported.flags_ignored,
        "packets": keys.len(),
        "tables": c.tables(),
        "build_s": build_s,
        "bytes": c.bytes(),
        "bytes_fresh": bytes_fresh,
        "mpps_single": single,
        "mpps_batched": batched,
        "tables_probed_per_packet": probes.tables as f64 / probes.packets.max(1) as f64,
        "classifier_insert_us_p99": cins.value_at_quantile(0.99) as f64 / 1e3,
        "classifier_delete_us_p99": cdel.value_at_quantile(0.99) as f64 / 1e3,
        "store_build_s": store_build_s,
        "mpps_worker": worker,
        "worker_vs_batched": worker_vs_batched,
        "insert_us_p50": ins.value_at_quantile(0.5) as f64 / 1e3,
        "insert_us_p99": ins.value_at_quantile(0.99) as f64 / 1e3,
        "delete_us_p50": del.value_at_quantile(0.5) as f64 / 1e3,
        "delete_us_p99": del.value_at_quantile(0.99) as f64 / 1e3,
        "update_path": "store, published, no journal",
        "mpps_miss": miss_mpps,
        "miss_packets": miss.len(),
        "miss_set_rules": partial.len(),
        "rounds": rounds,
        "compiled": compiled,
        "compile_s": compile_s,
        "compiled_bytes": c.compiled().map_or(0, cfdp_engine::acl::compiled::Compiled::bytes),
        // The set's family's tree (IPv6 with --v6).
        "compiled_shape": c.compiled().and_then(|c| if v6_at.is_some() {
            c.v6.as_ref().map(Layer::shape)
        } else {
            c.v4.as_ref().map(Layer::shape)
        }),
        "compiled_leaf_size": c.compiled().and_then(|c| if v6_at.is_some() {
            c.v6.as_ref().map(Layer::leaf_size)
        } else {
            c.v4.as_ref().map(Layer::leaf_size)
        }),
        "compile_refused": refused,
        "compile_left": left,
        "tree_levels_per_packet": levels as f64 / keys.len().max(1) as f64,
        "leaf_entries_per_packet": scanned as f64 / keys.len().max(1) as f64,
    });
    if let Some((
        (pct, single, batched, _, _, vs_fresh),
        (_, new_single, new_batched, patched, live, new_vs_fresh),
    )) = churned
    {
        // Bursts after the churn over bursts of the fresh set, timed in
        // the same rounds (medians of the rounds' ratios).
        line["churned_vs_fresh"] = vs_fresh.into();
        line["churned_new_ids_vs_fresh"] = new_vs_fresh.into();
        line["churn_pct"] = pct.into();
        // The same churn with the rules put back under new ids (no
        // revival in place), and where those went: patched into the tree,
        // or into the live tuple space.
        line["mpps_single_churned_new_ids"] = new_single.into();
        line["mpps_batched_churned_new_ids"] = new_batched.into();
        line["churn_new_ids_patched"] = patched.into();
        line["churn_new_ids_live"] = live.into();
        line["mpps_single_churned"] = single.into();
        line["mpps_batched_churned"] = batched.into();
    }
    if std::env::args().any(|a| a == "--compile-p99") {
        for (k, v) in compile_p99(rules, &keys) {
            line[k] = v;
        }
    }
    if std::env::args().any(|a| a == "--ports") {
        for (k, v) in ports(rounds) {
            line[k] = v;
        }
    }
    if std::env::args().any(|a| a == "--explosion") {
        let (tables, mpps) = explosion(rounds);
        line["explosion_tables"] = tables.into();
        line["explosion_mpps"] = mpps.into();
    }
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

/// Update latencies, ns.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn saturating_record(&mut self, ns: u64) {
        self.0.push(ns);
    }

    /// The `q` quantile (nearest rank), ns.
    fn value_at_quantile(&mut self, q: f64) -> u64 {
        if self.0.is_empty() {
            return 0;
        }
        self.0.sort_unstable();
        let i = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len()) - 1;
        self.0[i]
    }
}

/// An id no ClassBench rule has: updates insert rules under new ids, so
/// that they take the general insert path (patched into the compiled
/// layer, or the live one) rather than reviving the deleted rule in place.
const NEW_ID: RuleId = 1 << 30;

/// Deletes up to 2000 rules spread over the set and inserts each back under
/// a new id ([`NEW_ID`]), one at a time, timing each (ns).
fn updates(c: &mut AclClassifier, rules: &[cfdp_rules::AclRule]) -> (Samples, Samples) {
    let mut ins = Samples::default();
    let mut del = Samples::default();
    let step = (rules.len() / 2000).max(1);
    for r in rules.iter().step_by(step) {
        let t = Instant::now();
        c.remove(r.id).expect("present");
        del.saturating_record(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        c.insert(AclRule {
            id: r.id + NEW_ID,
            ..*r
        })
        .expect("absent");
        ins.saturating_record(t.elapsed().as_nanos() as u64);
    }
    (ins, del)
}

/// `--churn PCT`: PCT % of the set's rules (spread evenly over it) deleted
/// and inserted back (same match, priority and action; the same id, or a
/// new one with `new_ids`) with no compile in between: a rule put back
/// under its id is revived in the compiled layer, one under a new id is
/// patched into it or goes to the live tuple space
/// (`cfdp_engine::acl::compiled::overlay`). Then the rates again, and with
/// `--verdicts OUT` (same ids only) the verdicts after the churn in
/// `OUT.churned`. The rates are timed round by round beside `fresh`'s
/// bursts (this VM's speed moves for seconds at a time: timed in a phase
/// of their own, acl1_1k's churned bursts read 0.61x to 0.92x fresh).
/// Returns (PCT, single, batched, patched, live IPv4, the median of the
/// rounds' churned over fresh burst rates).
fn churn(
    c: &mut AclClassifier,
    fresh: &AclClassifier,
    rules: &[AclRule],
    pct: &str,
    keys: &[FlowKey],
    rounds: usize,
    new_ids: bool,
) -> (f64, f64, f64, usize, usize, f64) {
    let pct: f64 = match pct.parse() {
        Ok(p) if (0.0..=100.0).contains(&p) => p,
        _ => {
            eprintln!("classbench: --churn {pct}: a percentage 0..=100");
            std::process::exit(2)
        }
    };
    let n = (rules.len() as f64 * pct / 100.0).round() as usize;
    if n > 0 {
        let step = rules.len() as f64 / n as f64;
        for i in 0..n {
            let r = rules[(i as f64 * step) as usize];
            c.remove(r.id).expect("present");
            let id = if new_ids { r.id + NEW_ID } else { r.id };
            c.insert(AclRule { id, ..r }).expect("absent");
        }
    }
    if new_ids {
        // Same answers, other ids: no verdict file (it names rules by id).
    } else if let Some(out) = arg("--verdicts") {
        write_verdicts(&format!("{out}.churned"), c, keys);
    }
    let (mut single, mut batched, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (_, before) = rates(fresh, keys, 1);
        let (s, b) = rates(c, keys, 1);
        single.push(s);
        batched.push(b);
        ratio.push(b / before);
    }
    let l = c.layers();
    (
        pct,
        cfdp_bench::median(&mut single),
        cfdp_bench::median(&mut batched),
        l.patched,
        l.live_v4 + l.live_v6,
        cfdp_bench::median(&mut ratio),
    )
}

/// Whether a rule matches every packet of its family.
fn matches_all(r: &AclRule) -> bool {
    let m = &r.matcher;
    *m == AclMatch::any(m.v6())
}

/// The trace's packets moved to addresses no rule's prefixes cover (both
/// addresses from 0.0.0.0/8 upward, checked against the classifier), so
/// every packet misses every table: the most a packet can cost. With
/// `v6_at` the addresses are moved into IPv6 as the set was (`--v6`).
fn miss_trace(c: &AclClassifier, keys: &[FlowKey], v6_at: Option<u32>) -> Vec<FlowKey> {
    let mut out = Vec::with_capacity(keys.len());
    let mut probe = 0u32;
    for k in keys {
        let mut m = *k;
        // Walk addresses until one pair misses (a catch-all rule would
        // make this impossible: then the list stays empty).
        for _ in 0..64 {
            probe = probe.wrapping_mul(2_654_435_761).wrapping_add(0x9e37_79b9);
            m.src[..4].copy_from_slice(&probe.to_be_bytes());
            m.dst[..4].copy_from_slice(&probe.rotate_left(13).to_be_bytes());
            if let Some(at) = v6_at {
                m.src = v6_addr(&m.src, at);
                m.dst = v6_addr(&m.dst, at);
            }
            // A protocol few rules name, and other ports: rules that
            // wildcard both addresses still match on those.
            m.proto = 253;
            m.sport = (probe >> 3) as u16;
            m.dport = (probe >> 17) as u16;
            if c.classify(&m).is_none() {
                out.push(m);
                break;
            }
        }
    }
    out
}

/// One-rule batches into the store, with publication: each rule of the
/// set up to 2,000 deleted and inserted under a new id, timed (ns).
fn store_updates(store: &mut RuleStore, rules: &[AclRule]) -> (Samples, Samples) {
    let mut ins = Samples::default();
    let mut del = Samples::default();
    let one = |u: Update| Batch {
        atomicity: Atomicity::RollbackOnError,
        expected_generation: None,
        updates: vec![Ok(u)],
    };
    let step = (rules.len() / 2000).max(1);
    for r in rules.iter().step_by(step) {
        let t = Instant::now();
        let rep = store
            .apply(&one(Update::Delete(r.id)), |_, _| Ok(()))
            .expect("applies");
        store.settle();
        del.saturating_record(t.elapsed().as_nanos() as u64);
        assert!(rep.applied, "delete {}", r.id);
        let t = Instant::now();
        let new = AclRule {
            id: r.id + NEW_ID,
            ..*r
        }
        .to_rule();
        let rep = store
            .apply(&one(Update::Insert(new)), |_, _| Ok(()))
            .expect("applies");
        store.settle();
        ins.saturating_record(t.elapsed().as_nanos() as u64);
        assert!(rep.applied, "insert {}", r.id);
    }
    (ins, del)
}

/// `--make-trace`: see the module docs.
fn make_trace(rules_path: &str, out: &str) {
    let fail = |path: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("classbench: {path}: {e}");
        std::process::exit(2)
    };
    let text = std::fs::read_to_string(rules_path).unwrap_or_else(|e| fail(rules_path, &e));
    let set = cfdp_rules::classbench::parse_rules(&text, Action::Drop)
        .unwrap_or_else(|e| fail(rules_path, &e));
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut lines = Vec::with_capacity(set.rules.len() * 10);
    for r in &set.rules {
        let m = &r.matcher;
        // A random address of a prefix: its bits, then random ones.
        let addr = |p: &IpPrefix, rnd: u64| {
            let a = u32::from_be_bytes([p.addr()[0], p.addr()[1], p.addr()[2], p.addr()[3]]);
            let host = u32::MAX.checked_shr(u32::from(p.len())).unwrap_or(0);
            a | (rnd as u32 & host)
        };
        let in_range = |r: PortRange, rnd: u64| {
            let span = u64::from(r.hi() - r.lo()) + 1;
            u64::from(r.lo()) + rnd % span
        };
        for _ in 0..10 {
            let (a, b, c) = (next(), next(), next());
            let proto = m
                .proto()
                .map_or([6u8, 17, 1, (c >> 40) as u8][(c % 4) as usize], |p| p);
            lines.push(format!(
                "{}\t{}\t{}\t{}\t{}\t0\t{}",
                addr(&m.src(), a),
                addr(&m.dst(), a >> 32),
                in_range(m.sport(), b),
                in_range(m.dport(), b >> 32),
                proto,
                r.id
            ));
        }
    }
    // Shuffled (Fisher-Yates), so that a burst mixes rules.
    for i in (1..lines.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        lines.swap(i, j);
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if let Err(e) = std::fs::write(out, text) {
        fail(out, &e);
    }
}
