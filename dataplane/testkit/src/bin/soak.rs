//! Soak: a real `cfdp run` replaying a capture in a loop for a given time
//! while this client pushes random batches (inserts, deletes, modifies,
//! all three atomicity modes, batches that must roll back, stale
//! generations, malformed requests) at a fixed rate, checking every answer
//! against its own model of the rule set, then the data plane itself.
//!
//! The capture (`gen::soak`) has 64 UDP flows in a fixed, known order and
//! one worker replays it (`overload = "block"`: no packet is lost), so the
//! flow of the k-th packet the worker processes is known exactly. With the
//! packet count read just before each batch and just after its
//! acknowledgement (`ping`), and the rule counters at the end, the harness
//! checks that every rule matched every packet of its flow processed after
//! its batch was acknowledged, and none before the batch was sent (verify
//! mode); that the server's rule set equals the model (every acknowledged
//! rule present, nothing removed or rolled back left over); that in a quiet
//! final window the data plane's matched and dropped totals equal what the
//! model's rules predict (no stale rule enforced); that resident memory is
//! flat after warm-up; and that cfdp exits cleanly with no panic. The flow
//! filter starts sized for 16 rules (`--flow-capacity`), so the churn runs
//! it near capacity: Bloom-part placements, migration back to cuckoo
//! entries and an `auto_grow` rebuild happen under load, and are counted
//! (a run of 30 s or more where one of them never happened fails).
//!
//! `cargo run --release -p cfdp-testkit --bin soak -- --duration 120`
//! (CI runs 2 minutes; exit 1 on any failed check).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use cfdp_control::client::{Client, Target};
use cfdp_testkit::captures as gen;
use cfdp_testkit::SplitMix;
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    /// Seconds to push batches.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// Batches per second.
    #[arg(long, default_value_t = 20)]
    rate: u64,
    /// Frames per second replayed.
    #[arg(long, default_value_t = 200_000)]
    pps: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Items the flow filter is sized for at start: small, so the soak's
    /// rule churn runs the filter near capacity (Bloom-part placements,
    /// migration back to cuckoo entries, `auto_grow` rebuilds).
    #[arg(long, default_value_t = 16)]
    flow_capacity: usize,
    /// Working directory (default: a fresh one under the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

const FLOWS: u8 = 64;
const PER_FLOW: u32 = 8;
/// Rule ids drawn from 0..IDS.
const IDS: u32 = 96;
/// One burst: counters lag the packet count by at most this.
const B: u64 = 32;

/// A rule as the model keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct MRule {
    flow: u8,
    action: &'static str,
    port: u16,
    /// Packet count read before the batch that gave the rule its current
    /// match was sent, and after it was acknowledged.
    before: u64,
    after: u64,
    /// The counter also holds matches of an earlier match (a modify that
    /// changed the flow): only the lower bound applies.
    mixed: bool,
}

impl MRule {
    fn action_json(&self) -> Value {
        if self.action == "redirect" {
            json!({ "redirect": self.port })
        } else {
            json!(self.action)
        }
    }
    fn rule_json(&self, id: u32) -> Value {
        let (s, d) = gen::soak_flow(self.flow);
        let ip = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_string();
        json!({"id": id, "match": {"flow": {"src": ip(s), "dst": ip(d), "proto": "udp",
               "sport": 1000, "dport": 2000}}, "action": self.action_json()})
    }
}

/// Packets of flow `f` among global packet numbers [a, b).
fn count_flow(f: u8, a: u64, b: u64) -> u64 {
    if b <= a {
        return 0;
    }
    let n = u64::from(FLOWS) * u64::from(PER_FLOW);
    let per_pass = u64::from(PER_FLOW);
    let upto = |x: u64| {
        let whole = (x / n) * per_pass;
        let rest = (0..x % n)
            .filter(|&k| gen::soak_frame_flow(k as u32, FLOWS) == f)
            .count() as u64;
        whole + rest
    };
    upto(b) - upto(a)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

struct Failures(Vec<String>);
impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            eprintln!("soak: FAILED: {w}");
            self.0.push(w);
        }
    }
}

/// Packets received so far (a `ping`), and the ping's round trip in µs.
fn packets(c: &mut Client, rtts: &mut Vec<u64>) -> u64 {
    let t = Instant::now();
    let r = c.call("ping", json!({})).expect("ping");
    rtts.push(t.elapsed().as_micros() as u64);
    r["result"]["packets"].as_u64().expect("packets")
}

fn percentiles(v: &mut [u64]) -> Value {
    v.sort_unstable();
    let q = |p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    json!({"count": v.len(), "p50": q(0.5), "p99": q(0.99), "max": q(1.0)})
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() -> ExitCode {
    let args = Args::parse();
    // `--dir`: the operator's directory, emptied first; else a fresh
    // scratch directory (`tempfile`), removed after a clean run and kept
    // for a look after a failed one.
    let (dir, scratch) = match args.dir.clone() {
        Some(d) => {
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("soak dir");
            (d, None)
        }
        None => {
            let s = tempfile::Builder::new()
                .prefix("cfdp-soak-")
                .tempdir()
                .expect("a scratch directory");
            (s.path().to_path_buf(), Some(s))
        }
    };
    let cap = dir.join("soak.pcap");
    gen::write_pcap(&cap, &gen::soak(FLOWS, PER_FLOW)).expect("write capture");
    let socket = dir.join("ctl.sock");
    let cfg = dir.join("soak.toml");
    let mut c = cfdp_testkit::node::looping(&cap, args.pps, &socket, &dir.join("state"));
    c.dataplane.workers = 1;
    c.dataplane.mode = cfdp_engine::Mode::Verify;
    c.dataplane.overload = cfdp_config::Overload::Block;
    c.filter.flow_capacity = args.flow_capacity;
    c.filter.prefix_capacity = 16;
    c.control.compact_every = 200;
    cfdp_testkit::node::write(&cfg, &c);
    let exe = std::env::current_exe()
        .expect("own path")
        .with_file_name("cfdp");
    let mut child: Child = Command::new(&exe)
        .args(["run", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("stdout")).unwrap(),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr")).unwrap(),
        ))
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build the cfdp binary first)", exe.display()));
    let pid = child.id();
    let start = Instant::now();
    let mut c = loop {
        if let Ok(c) = Client::connect(&Target::Unix(&socket)) {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "cfdp did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut fails = Failures(Vec::new());
    let mut rng = SplitMix(args.seed);
    let mut model: HashMap<u32, MRule> = HashMap::new();
    let mut generation = c.call("hello", json!({})).unwrap()["result"]["generation"]
        .as_u64()
        .unwrap();
    let (mut bloom_placed, mut grown) = (0u64, 0u64);
    let (mut batches, mut updates, mut ok_updates, mut bad_requests, mut rolled_back) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut rss_warm = 0;
    let mut rss_samples: Vec<u64> = Vec::new();
    let mut ping_us: Vec<u64> = Vec::new();
    let mut ping_rtt: Vec<u64> = Vec::new();
    let period = Duration::from_secs_f64(1.0 / args.rate.max(1) as f64);
    let run_start = Instant::now();
    let mut next_at = run_start;
    while run_start.elapsed() < Duration::from_secs(args.duration) {
        next_at += period;
        if let Some(d) = next_at.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        if rss_warm == 0 && run_start.elapsed() >= Duration::from_secs((args.duration / 4).max(1)) {
            rss_warm = rss_kb(pid);
        }
        if rss_samples.len() < (run_start.elapsed().as_secs() / 10) as usize + 1 {
            rss_samples.push(rss_kb(pid));
        }
        // 5 %: a bad request, which must be answered with an error.
        if rng.below(20) == 0 {
            let (line, code) = match rng.below(4) {
                0 => ("{\"id\": 1, \"method\": \"apply\", ".to_string(), -32700),
                1 => ("{\"id\": 1, \"method\": \"drop_all\"}".to_string(), -32601),
                2 => (
                    "{\"id\": 1, \"method\": \"apply\", \"params\": {\"updates\": {}}}".to_string(),
                    -32602,
                ),
                _ => (
                    json!({"id": 1, "method": "apply", "params": {"expected_generation": generation + 1000, "updates": []}}).to_string(),
                    -32001,
                ),
            };
            let r = c.send_raw(&line).expect("answer to a bad request");
            fails.check(r["error"]["code"] == code, || format!("{line} -> {r}"));
            bad_requests += 1;
            continue;
        }
        let atomicity =
            ["continue_on_error", "rollback_on_error", "dataplane_atomic"][rng.below(3) as usize];
        let n = 1 + rng.below(12) as usize;
        // Build the batch and predict each code with an overlay model.
        let mut overlay: HashMap<u32, Option<MRule>> = HashMap::new();
        let get = |overlay: &HashMap<u32, Option<MRule>>, id: u32| match overlay.get(&id) {
            Some(r) => *r,
            None => model.get(&id).copied(),
        };
        let flow_owner = |overlay: &HashMap<u32, Option<MRule>>, f: u8| {
            (0..IDS).find(|&id| get(overlay, id).is_some_and(|r| r.flow == f))
        };
        let mut ups = Vec::new();
        let mut predicted = Vec::new();
        for _ in 0..n {
            let id = rng.below(u64::from(IDS)) as u32;
            let flow = rng.below(u64::from(FLOWS)) as u8;
            let action = ["drop", "count", "allow", "redirect"][rng.below(4) as usize];
            let mr = MRule {
                flow,
                action,
                port: 1 + rng.below(3) as u16,
                before: 0,
                after: 0,
                mixed: false,
            };
            let op = rng.below(3);
            let existing = get(&overlay, id);
            let (u, code) = match (op, existing) {
                (0, _) => {
                    let code = if existing.is_some() || flow_owner(&overlay, flow).is_some() {
                        "already_exists"
                    } else {
                        "ok"
                    };
                    (json!({"op": "insert", "rule": mr.rule_json(id)}), code)
                }
                (1, _) => (
                    json!({"op": "delete", "id": id}),
                    if existing.is_some() {
                        "ok"
                    } else {
                        "not_found"
                    },
                ),
                _ => {
                    let code = match existing {
                        None => "not_found",
                        Some(_) => match flow_owner(&overlay, flow) {
                            Some(o) if o != id => "already_exists",
                            _ => "ok",
                        },
                    };
                    (json!({"op": "modify", "rule": mr.rule_json(id)}), code)
                }
            };
            if code == "ok" {
                let new = match u["op"].as_str().unwrap() {
                    "delete" => None,
                    "insert" => Some(mr),
                    _ => {
                        let old = existing.unwrap();
                        Some(if old.flow == mr.flow {
                            MRule {
                                before: old.before,
                                after: old.after,
                                mixed: old.mixed,
                                ..mr
                            }
                        } else {
                            MRule { mixed: true, ..mr }
                        })
                    }
                };
                overlay.insert(id, new);
            }
            ups.push(u);
            predicted.push(code);
        }
        let failed = predicted.iter().any(|c| *c != "ok");
        if failed && atomicity != "continue_on_error" {
            for p in &mut predicted {
                if *p == "ok" {
                    *p = "aborted";
                }
            }
            overlay.clear();
            rolled_back += 1;
        }
        let before = packets(&mut c, &mut ping_rtt);
        let t0 = Instant::now();
        let r = c
            .call(
                "apply",
                json!({"atomicity": atomicity, "expected_generation": generation, "updates": ups}),
            )
            .expect("apply answered");
        ping_us.push(t0.elapsed().as_micros() as u64);
        let after = packets(&mut c, &mut ping_rtt);
        bloom_placed += r["result"]["filter"]["bloom"].as_u64().unwrap_or(0);
        grown += r["result"]["filter"]["grown"]
            .as_array()
            .map_or(0, |g| g.len() as u64);
        batches += 1;
        updates += n as u64;
        let got: Vec<&str> = r["result"]["results"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["code"].as_str().unwrap_or("?"))
                    .collect()
            })
            .unwrap_or_default();
        fails.check(got == predicted, || {
            format!("batch {batches} ({atomicity}): predicted {predicted:?}, got {r}")
        });
        if let Some(g) = r["result"]["generation"].as_u64() {
            generation = g;
        }
        for (id, new) in overlay {
            match new {
                None => {
                    model.remove(&id);
                }
                Some(mut m) => {
                    let prev = model.get(&id);
                    let keeps_point = prev.is_some_and(|p| p.flow == m.flow);
                    if !keeps_point {
                        m.before = before;
                        m.after = after;
                    }
                    model.insert(id, m);
                    ok_updates += 1;
                }
            }
        }
    }
    // Quiet final window: no batches, two reads of the rules 1 s apart.
    std::thread::sleep(Duration::from_millis(300));
    let migrated = c.call("stats", json!({})).unwrap()["result"]["migrated"]
        .as_u64()
        .unwrap_or(0);
    let r1 = c.call("rules", json!({"limit": 10000})).unwrap()["result"].clone();
    std::thread::sleep(Duration::from_secs(1));
    let r2 = c.call("rules", json!({"limit": 10000})).unwrap()["result"].clone();
    let rss_end = rss_kb(pid);
    let by_id = |r: &Value| -> HashMap<u32, Value> {
        r["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["id"].as_u64().unwrap() as u32, x.clone()))
            .collect()
    };
    let (s1, s2) = (by_id(&r1), by_id(&r2));
    // Counters of a read cover at least the packets up to one burst before
    // `packets` and at most those before `packets_after`.
    let num = |r: &Value, k: &str| r[k].as_u64().unwrap();
    let (p1, p1a) = (num(&r1, "packets"), num(&r1, "packets_after"));
    let (p2, p2a) = (num(&r2, "packets"), num(&r2, "packets_after"));
    // 1. The server's rule set is the model's.
    fails.check(s2.len() == model.len(), || {
        format!("server has {} rules, model {}", s2.len(), model.len())
    });
    for (id, m) in &model {
        let want = m.rule_json(*id);
        let have = s2.get(id);
        let same = have.is_some_and(|h| {
            let mut h = h.clone();
            if let Some(o) = h.as_object_mut() {
                o.remove("packets");
                o.remove("bytes");
                o.remove("last_hit_unix_s");
            }
            cfdp_rules::parse_rule(&h, None).ok() == cfdp_rules::parse_rule(&want, None).ok()
        });
        fails.check(same, || format!("rule {id}: model {want}, server {have:?}"));
    }
    // 2. Every rule matched every packet of its flow after its batch was
    //    acknowledged, and none before the batch was sent.
    let mut checked = 0;
    for (id, m) in &model {
        let Some(have) = s2.get(id) else { continue };
        let cnt = have["packets"].as_u64().unwrap();
        let lo = count_flow(m.flow, m.after, p2.saturating_sub(B));
        let hi = count_flow(m.flow, m.before.saturating_sub(B), p2a);
        fails.check(cnt >= lo, || {
            format!(
                "rule {id} (flow {}): {cnt} matches < {lo} packets after its ack",
                m.flow
            )
        });
        if !m.mixed {
            fails.check(cnt <= hi, || {
                format!(
                    "rule {id} (flow {}): {cnt} matches > {hi} packets since its batch",
                    m.flow
                )
            });
        }
        // Quiet window: exactly its flow's packets.
        let d = cnt - s1.get(id).map_or(0, |x| x["packets"].as_u64().unwrap());
        let (wlo, whi) = (
            count_flow(m.flow, p1a, p2.saturating_sub(B)),
            count_flow(m.flow, p1.saturating_sub(B), p2a),
        );
        fails.check(d >= wlo && d <= whi, || {
            format!(
                "rule {id} (flow {}): {d} matches in the final window, expected {wlo}..={whi}",
                m.flow
            )
        });
        checked += 1;
    }
    // 3. Nothing else is enforced: totals in the window are what the
    //    model's rules explain.
    let dm = r2["matched"].as_u64().unwrap() - r1["matched"].as_u64().unwrap();
    let dd = r2["dropped"].as_u64().unwrap() - r1["dropped"].as_u64().unwrap();
    let explained = |pred: &dyn Fn(&MRule) -> bool, a: u64, b: u64| -> u64 {
        model
            .values()
            .filter(|m| pred(m))
            .map(|m| count_flow(m.flow, a, b))
            .sum()
    };
    // Totals are read with `packets`: they cover [p - B, p) at least and
    // [.., p) at most, so the window explains between these bounds.
    let slack = 2 * B;
    let em = explained(&|_| true, p1, p2);
    let ed = explained(&|m| m.action == "drop", p1, p2);
    fails.check(dm + slack >= em && dm <= em + slack, || {
        format!("matched {dm} in the final window, the model's rules explain {em}")
    });
    fails.check(dd + slack >= ed && dd <= ed + slack, || {
        format!("dropped {dd} in the final window, the model's drop rules explain {ed}")
    });
    // 4. Memory flat after warm-up.
    fails.check(rss_end <= rss_warm + rss_warm / 5 + 4096, || {
        format!("RSS grew from {rss_warm} kB after warm-up to {rss_end} kB")
    });
    drop(c);
    // 5. Clean exit, no panic.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = child.wait().expect("wait");
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    fails.check(status.success(), || {
        format!("cfdp exited {status}: {stderr}")
    });
    fails.check(!stderr.contains("panicked"), || format!("panic: {stderr}"));
    // Near capacity the filter's whole insert path must have run under load.
    if args.duration >= 30 {
        fails.check(bloom_placed > 0 && grown > 0 && migrated > 0, || {
            format!(
                "the soak did not drive the filter near capacity: {bloom_placed} Bloom \
                 placements, {grown} growths, {migrated} migrated (flow_capacity = {})",
                args.flow_capacity
            )
        });
    }
    let summary = json!({
        "duration_s": run_start.elapsed().as_secs_f64(),
        "flow_capacity": args.flow_capacity,
        "bloom_placements": bloom_placed, "filters_grown": grown, "migrated": migrated,
        "batches": batches, "updates": updates, "applied_updates": ok_updates,
        "rolled_back_batches": rolled_back, "bad_requests": bad_requests,
        "rules_at_end": model.len(), "rules_checked": checked,
        "packets": p2, "generation": generation,
        "rss_kb_after_warmup": rss_warm, "rss_kb_end": rss_end,
        "rss_kb_every_10s": rss_samples,
        "apply_rtt_us": percentiles(&mut ping_us),
        "ping_rtt_us": percentiles(&mut ping_rtt),
        "pps": args.pps,
        "failures": fails.0.len(),
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    if fails.0.is_empty() {
        if args.dir.is_some() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        ExitCode::SUCCESS
    } else {
        let _ = scratch.map(tempfile::TempDir::keep);
        eprintln!(
            "soak: {} check(s) failed; state kept in {}",
            fails.0.len(),
            dir.display()
        );
        ExitCode::from(1)
    }
}
