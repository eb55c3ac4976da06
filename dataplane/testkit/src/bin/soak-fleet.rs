//! Fleet soak: a real etcd, several `cfdp run` nodes (pcap loop, journal
//! on) and random batches pushed to the fleet through `cfdp ctl --etcd`
//! for a given time, every answer checked against this harness's own model
//! of the rule set; after every few batches `wait` for the generation and
//! check that every node's rules (read over its own socket) and the
//! fleet's (read from etcd) equal the model. Nodes are killed with -9 now
//! and then while batches land, and must catch up when restarted.
//!
//! Batches mix inserts (new, and of ids or matches already taken), modifies
//! (same or new match), deletes (present and absent ids), the three
//! atomicity modes, and `expected_generation` right and wrong.
//!
//! `cargo build --release -p cfdp --features etcd -p cfdp-testkit &&
//! ./target/release/soak-fleet --duration 60` (needs `etcd`: apt-get
//! install etcd-server). Exit 1 on any failed check.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use cfdp_control::client::{Client, Target};
use cfdp_testkit::etcd::EtcdServer;
use cfdp_testkit::SplitMix;
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    /// Seconds to push batches.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Nodes in the fleet.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The cfdp binary (built with `--features etcd`); default: beside
    /// this one.
    #[arg(long)]
    cfdp: Option<PathBuf>,
}

/// Rule ids drawn from 0..IDS, matches (source ports) from 0..PORTS: small
/// ranges, so ids and matches collide often.
const IDS: u64 = 200;
const PORTS: u64 = 240;

/// The model: id → (port, action).
type Model = BTreeMap<u64, (u64, &'static str)>;

fn rule(id: u64, port: u64, action: &str) -> Value {
    json!({"id": id, "match": {"flow": {"src": "10.9.9.9", "dst": "10.8.8.8", "proto": "udp",
        "sport": 10_000 + port, "dport": 53}}, "action": action})
}

/// A rule read back (from a node or etcd) in the model's terms.
fn of_rule(r: &Value) -> Option<(u64, (u64, String))> {
    let id = r["id"].as_u64()?;
    let port = r["match"]["flow"]["sport"].as_u64()? - 10_000;
    Some((id, (port, r["action"].as_str()?.to_string())))
}

struct Proc(Option<Child>);
impl Proc {
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Fleet {
    cfdp: PathBuf,
    url: String,
    dir: PathBuf,
}

impl Fleet {
    fn ctl(&self, args: &[&str]) -> (Value, i32) {
        let out = Command::new(&self.cfdp)
            .args(["ctl", "--etcd", &self.url, "--prefix", "/soak"])
            .args(args)
            .output()
            .expect("cfdp ctl");
        let text = String::from_utf8_lossy(&out.stdout);
        let v = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
        (v, out.status.code().unwrap_or(-1))
    }

    fn start_node(&self, name: &str) -> Proc {
        let cfg = cfdp_testkit::etcd::node_config(&self.dir, &self.url, "/soak", name, |_| {});
        let _ = std::fs::remove_file(self.socket(name));
        let child = Command::new(&self.cfdp)
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cfdp run");
        let start = Instant::now();
        while Client::connect(&Target::Unix(&self.socket(name))).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{name}: no socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Proc(Some(child))
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sock"))
    }

    /// A node's rules over its own socket, all pages.
    fn node_rules(&self, name: &str) -> Option<BTreeMap<u64, (u64, String)>> {
        let mut c = Client::connect(&Target::Unix(&self.socket(name))).ok()?;
        let r = c.call("rules", json!({"limit": 10000})).ok()?;
        r["result"]["rules"]
            .as_array()?
            .iter()
            .map(of_rule)
            .collect()
    }
}

fn as_model(m: &Model) -> BTreeMap<u64, (u64, String)> {
    m.iter()
        .map(|(id, (p, a))| (*id, (*p, a.to_string())))
        .collect()
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() -> ExitCode {
    let args = Args::parse();
    let cfdp = args.cfdp.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("cfdp")
    });
    let scratch = tempfile::Builder::new()
        .prefix("cfdp-soak-fleet-")
        .tempdir()
        .expect("a scratch directory");
    let dir = scratch.path().to_path_buf();
    let etcd = match EtcdServer::start(&dir, &[]) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("soak-fleet: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url = etcd.url.clone();
    let fleet = Fleet {
        cfdp,
        url,
        dir: dir.clone(),
    };
    let names: Vec<String> = (0..args.nodes).map(|i| format!("n{i}")).collect();
    let mut nodes: Vec<Proc> = names.iter().map(|n| fleet.start_node(n)).collect();

    let mut rng = SplitMix(args.seed);
    let mut model: Model = BTreeMap::new();
    let mut generation = 0i64;
    let mut failures: Vec<String> = Vec::new();
    let (mut batches, mut updates, mut applied, mut checks, mut kills) = (0u64, 0, 0, 0, 0);
    let fail = |f: &mut Vec<String>, s: String| {
        eprintln!("soak-fleet: FAIL {s}");
        f.push(s);
    };
    let mut down: Option<(usize, Instant)> = None;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(args.duration) && failures.len() < 10 {
        // Now and then a node dies (-9) and comes back a second later.
        match down {
            None if rng.below(40) == 0 && args.nodes > 1 => {
                let i = rng.below(args.nodes as u64) as usize;
                nodes[i].kill();
                kills += 1;
                down = Some((i, Instant::now()));
            }
            Some((i, t)) if t.elapsed() > Duration::from_secs(1) => {
                nodes[i] = fleet.start_node(&names[i]);
                down = None;
            }
            _ => {}
        }
        // A random batch and the codes the model expects.
        let n = 1 + rng.below(12);
        let atomicity =
            ["rollback_on_error", "dataplane_atomic", "continue_on_error"][rng.below(3) as usize];
        let mut next = model.clone();
        let mut ups = Vec::new();
        let mut want = Vec::new();
        for _ in 0..n {
            let id = rng.below(IDS);
            let port = rng.below(PORTS);
            let action = ["drop", "allow", "count"][rng.below(3) as usize];
            let taken = |m: &Model, p: u64, except: u64| {
                m.iter().any(|(i, (q, _))| *q == p && *i != except)
            };
            match rng.below(3) {
                0 => {
                    ups.push(json!({"op": "insert", "rule": rule(id, port, action)}));
                    if next.contains_key(&id) || taken(&next, port, u64::MAX) {
                        want.push("already_exists");
                    } else {
                        next.insert(id, (port, action));
                        want.push("ok");
                    }
                }
                1 => {
                    // Modify: often keep the match, sometimes move it.
                    let port = match next.get(&id) {
                        Some((p, _)) if rng.below(2) == 0 => *p,
                        _ => port,
                    };
                    ups.push(json!({"op": "modify", "rule": rule(id, port, action)}));
                    if !next.contains_key(&id) {
                        want.push("not_found");
                    } else if taken(&next, port, id) {
                        want.push("already_exists");
                    } else {
                        next.insert(id, (port, action));
                        want.push("ok");
                    }
                }
                _ => {
                    ups.push(json!({"op": "delete", "id": id}));
                    if next.remove(&id).is_some() {
                        want.push("ok");
                    } else {
                        want.push("not_found");
                    }
                }
            }
        }
        let all_ok = want.iter().all(|c| *c == "ok");
        let all_or_nothing = atomicity != "continue_on_error";
        let stale = rng.below(20) == 0;
        let mut batch = json!({"atomicity": atomicity, "updates": ups});
        if stale || rng.below(4) == 0 {
            let g = if stale {
                generation + 1_000_000
            } else {
                generation
            };
            batch["expected_generation"] = json!(g);
        }
        let file = dir.join("batch.json");
        std::fs::write(&file, batch.to_string()).unwrap();
        let (r, _) = fleet.ctl(&["apply", file.to_str().unwrap()]);
        batches += 1;
        updates += n;
        if stale {
            if !r["error"]
                .as_str()
                .is_some_and(|e| e.contains("expected_generation"))
            {
                fail(&mut failures, format!("stale generation accepted: {r}"));
            }
            continue;
        }
        let Some(codes) = r["results"].as_array() else {
            fail(&mut failures, format!("no results: {r}"));
            continue;
        };
        let got: Vec<&str> = codes
            .iter()
            .map(|c| c["code"].as_str().unwrap_or("?"))
            .collect();
        let expect: Vec<&str> = if all_or_nothing && !all_ok {
            want.iter()
                .map(|c| if *c == "ok" { "aborted" } else { c })
                .collect()
        } else {
            want.clone()
        };
        if got != expect {
            fail(
                &mut failures,
                format!("batch {batch}: codes {got:?}, model {expect:?}"),
            );
            continue;
        }
        // continue_on_error: the model's running state is exactly what
        // succeeded, in order; all-or-nothing: everything or nothing.
        if !all_or_nothing || all_ok {
            model = next;
            applied += u64::from(want.contains(&"ok"));
        }
        generation = r["generation"].as_i64().unwrap_or(generation);
        // Every few batches: everyone agrees with the model.
        if batches % 8 == 0 {
            let (w, code) = fleet.ctl(&["wait", &generation.to_string(), "--timeout", "30"]);
            if code != 0 {
                fail(&mut failures, format!("wait {generation}: {w}"));
                continue;
            }
            let want = as_model(&model);
            let (f, _) = fleet.ctl(&["rules"]);
            let in_etcd: Option<BTreeMap<_, _>> = f["rules"]
                .as_array()
                .map(|v| v.iter().filter_map(of_rule).collect());
            if in_etcd.as_ref() != Some(&want) {
                fail(
                    &mut failures,
                    format!("etcd holds {in_etcd:?}, model {want:?}"),
                );
            }
            for (i, name) in names.iter().enumerate() {
                if matches!(down, Some((d, _)) if d == i) {
                    continue;
                }
                // A restarted node may still be catching up: `wait` counts
                // it only once it has; give it the same 30 s.
                let t = Instant::now();
                loop {
                    let got = fleet.node_rules(name);
                    if got.as_ref() == Some(&want) {
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(30) {
                        fail(
                            &mut failures,
                            format!("{name} holds {got:?}, model {want:?}"),
                        );
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                checks += 1;
            }
        }
    }
    let summary = json!({
        "seconds": t0.elapsed().as_secs_f64(), "nodes": args.nodes, "batches": batches,
        "updates": updates, "batches_with_effect": applied, "node_checks": checks,
        "kills": kills, "rules_at_end": model.len(), "generation": generation,
        "failures": failures.len(),
    });
    println!("{summary:#}");
    drop(nodes);
    drop(etcd);
    drop(scratch);
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
