//! A fleet against a real etcd (Debian's `etcd-server`): two `cfdp run`
//! nodes sharing one rule set, `cfdp ctl --etcd` as the controller.
//!
//! Needs a build with `--features etcd` and the `etcd` binary; without the
//! binary each test says so and returns — unless `REQUIRE_ETCD` is set
//! (CI sets it), which makes that a failure.
#![cfg(feature = "etcd")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cfdp_config::RunConfig;
use cfdp_control::client::{Client, Target};
use cfdp_engine::Mode;
use cfdp_testkit::etcd::{node_config, EtcdServer};
use serde_json::{json, Value};

/// A throw-away etcd (`cfdp_testkit::etcd`) in its own directory, which
/// goes with it.
struct Etcd {
    server: EtcdServer,
    url: String,
    dir: cfdp_testkit::dirs::TestDir,
}

impl Etcd {
    fn start(name: &str) -> Option<Etcd> {
        if !EtcdServer::installed() {
            assert!(
                std::env::var_os("REQUIRE_ETCD").is_none(),
                "REQUIRE_ETCD is set, but there is no etcd binary (apt-get install etcd-server)"
            );
            eprintln!("cluster test skipped: no etcd binary (apt-get install etcd-server)");
            return None;
        }
        let dir = cfdp_testkit::dirs::test_dir(&format!("etcd-{name}"));
        let server = EtcdServer::start(&dir, &[]).unwrap();
        Some(Etcd {
            url: server.url.clone(),
            server,
            dir,
        })
    }

    /// Starts etcd again on its ports and data; whether it came up.
    fn spawn(&mut self) -> bool {
        self.server.spawn()
    }

    fn kill(&mut self) {
        self.server.kill();
    }

    /// A client of this etcd, for what `cfdp ctl` does not do (compaction).
    fn client(&self) -> cfdp_cluster::etcd::Etcd {
        cfdp_cluster::etcd::Etcd::connect(
            std::slice::from_ref(&self.url),
            &cfdp_cluster::EtcdSecurity::default(),
        )
        .unwrap()
    }

    /// `cfdp ctl --etcd … --prefix P ARGS`: its JSON and exit status.
    fn ctl(&self, prefix: &str, args: &[&str]) -> (Value, i32) {
        let out = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .args(["ctl", "--etcd", &self.url, "--prefix", prefix])
            .args(args)
            .output()
            .unwrap();
        (json_of(&out), out.status.code().unwrap_or(-1))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // The scratch directory goes with the field, after the server.
        self.kill();
    }
}

fn json_of(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
}

/// A `cfdp run` node of the fleet, replaying a capture in a loop.
struct Node {
    child: Option<Child>,
    socket: PathBuf,
    cfg: PathBuf,
}

impl Node {
    fn start(etcd: &Etcd, prefix: &str, name: &str) -> Node {
        Self::start_with(etcd, prefix, name, |_| {})
    }

    /// As `start`, its configuration then set by `edit`.
    fn start_with(
        etcd: &Etcd,
        prefix: &str,
        name: &str,
        edit: impl FnOnce(&mut RunConfig),
    ) -> Node {
        let socket = etcd.dir.join(format!("{name}.sock"));
        let cfg = node_config(&etcd.dir, &etcd.url, prefix, name, edit);
        let mut n = Node {
            child: None,
            socket,
            cfg,
        };
        n.restart();
        n
    }

    fn restart(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_cfdp"))
                .args(["run", "--config"])
                .arg(&self.cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let start = Instant::now();
        while Client::connect(&Target::Unix(&self.socket)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "node socket");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`: no clean shutdown, the lease is not revoked.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            let _ = c.wait();
        }
    }

    /// Waits until the node has caught up to generation `g` (its `stats`).
    fn caught_up(&self, g: i64) {
        let start = Instant::now();
        loop {
            let s = self.call("stats", json!({}))["result"]["cluster"].clone();
            if s["caught_up"] == true && s["generation"].as_i64() >= Some(g) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "not caught up: {s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn packets(&self) -> u64 {
        self.call("stats", json!({}))["result"]["totals"]["packets"]
            .as_u64()
            .unwrap()
    }

    fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status()
                .unwrap();
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "node exited with {:?}", out.status);
        }
    }

    fn call(&self, method: &str, params: Value) -> Value {
        let mut c = Client::connect(&Target::Unix(&self.socket)).unwrap();
        c.call(method, params).unwrap()
    }

    /// The node's rules as (id, canonical rule JSON without counters).
    fn rules(&self) -> Vec<Value> {
        let r = self.call("rules", json!({}));
        let mut v: Vec<Value> = r["result"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(rule_fields)
            .collect();
        v.sort_by_key(|r| r["id"].as_u64());
        v
    }

    fn local_generation(&self) -> u64 {
        self.call("stats", json!({}))["result"]["generation"]
            .as_u64()
            .unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A rule's own fields (`priority` only when it has one), without a
/// node's counters.
fn rule_fields(r: &Value) -> Value {
    let mut m = serde_json::Map::new();
    for k in ["id", "priority", "match", "action"] {
        if let Some(v) = r.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    Value::Object(m)
}

fn write_batch(dir: &Path, name: &str, batch: Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, batch.to_string()).unwrap();
    p.display().to_string()
}

fn flow(id: u32, sport: u16) -> Value {
    json!({"id": id, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2",
        "proto": "tcp", "sport": sport, "dport": 80}}, "action": "drop"})
}

/// The fleet's rules as etcd holds them, sorted by id.
fn fleet_rules(etcd: &Etcd, prefix: &str) -> Vec<Value> {
    let (r, code) = etcd.ctl(prefix, &["rules"]);
    assert_eq!(code, 0, "{r}");
    r["rules"].as_array().unwrap().clone()
}

#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn two_nodes_follow_one_rule_set_batch_by_batch() {
    let Some(etcd) = Etcd::start("follow") else {
        return;
    };
    let prefix = "/cfdp/follow";
    let a = Node::start(&etcd, prefix, "edge-a");
    let mut b = Node::start(&etcd, prefix, "edge-b");
    let mut c = Node::start(&etcd, prefix, "edge-c");

    // Three batches; each is one etcd transaction, whose revision is the
    // fleet generation the nodes report once applied.
    let batches = [
        json!({"updates": [{"op": "insert", "rule": flow(1, 40000)},
                           {"op": "insert", "rule": {"id": 2, "match": {"dst_prefix": "192.0.2.0/24",
                               "proto": "udp", "port": 53}, "action": "drop"}}]}),
        json!({"updates": [{"op": "modify", "rule": flow(1, 40001)},
                           {"op": "insert", "rule": flow(3, 40000)}]}),
        json!({"updates": [{"op": "delete", "id": 2}], "atomicity": "continue_on_error"}),
    ];
    // Wait for both nodes' first resync before counting local batches.
    let (f, _) = etcd.ctl(prefix, &["fleet"]);
    let g0 = f["generation"].as_i64().unwrap();
    let (w, code) = etcd.ctl(prefix, &["wait", &g0.to_string(), "--timeout", "20"]);
    assert_eq!(code, 0, "{w}");
    let local0 = [&a, &b, &c].map(Node::local_generation);
    let mut g = 0;
    for (i, batch) in batches.iter().enumerate() {
        let file = write_batch(&etcd.dir, &format!("b{i}.json"), batch.clone());
        let (r, code) = etcd.ctl(prefix, &["apply", &file]);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["applied"], true, "{r}");
        let next = r["generation"].as_i64().unwrap();
        assert!(next > g, "generations increase: {g} then {next}");
        g = next;
    }
    let (w, code) = etcd.ctl(prefix, &["wait", &g.to_string(), "--timeout", "20"]);
    assert_eq!(code, 0, "{w}");
    let want = fleet_rules(&etcd, prefix);
    assert_eq!(want.len(), 2, "{want:?}");
    for n in [&a, &b, &c] {
        assert_eq!(n.rules(), want, "a node's rules differ from the fleet's");
        // Every revision once: one local batch per fleet batch.
        let s = n.call("stats", json!({}))["result"].clone();
        assert!(s["cluster"]["generation"].as_i64() >= Some(g), "{s}");
        let r = n.call("rules", json!({}))["result"].clone();
        assert!(r["fleet_generation"].as_i64() >= Some(g), "{r}");
    }
    assert_eq!(
        [&a, &b, &c].map(Node::local_generation),
        local0.map(|g| g + 3),
        "each fleet batch is exactly one local batch"
    );

    // A node's own socket refuses apply (one source of truth).
    let r = a.call(
        "apply",
        json!({"updates": [{"op": "insert", "rule": flow(9, 9)}]}),
    );
    assert!(
        r["error"]["message"].as_str().unwrap().contains(prefix),
        "{r}"
    );

    // A node that was down catches up: stopped, the fleet changes, it
    // starts again (from its journal) and resyncs.
    b.stop();
    let (f, _) = etcd.ctl(prefix, &["fleet"]);
    let edge_b = f["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "edge-b")
        .cloned()
        .unwrap();
    assert_eq!(edge_b["live"], false, "a stopped node is not live: {f}");
    let file = write_batch(
        &etcd.dir,
        "b3.json",
        json!({"updates": [{"op": "delete", "id": 1}, {"op": "insert", "rule": flow(4, 1234)}]}),
    );
    let (r, code) = etcd.ctl(prefix, &["apply", &file]);
    assert_eq!(code, 0, "{r}");
    let g = r["generation"].as_i64().unwrap();
    b.restart();
    // `wait` counts a node only once it has caught up.
    b.caught_up(g);
    let (w, code) = etcd.ctl(prefix, &["wait", &g.to_string(), "--timeout", "20"]);
    assert_eq!(code, 0, "{w}");
    assert_eq!(w["nodes"], 3, "{w}");
    let want = fleet_rules(&etcd, prefix);
    assert_eq!(b.rules(), want);
    assert_eq!(a.rules(), want);
    assert_eq!(c.rules(), want);

    // wait times out for a generation nobody has, naming the nodes.
    let (w, code) = etcd.ctl(
        prefix,
        &["wait", &(g + 1_000_000).to_string(), "--timeout", "1"],
    );
    assert_eq!(code, 1, "{w}");
    let lagging: Vec<&str> = w["lagging"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["node"].as_str())
        .collect();
    assert_eq!(lagging.len(), 3, "{w}");

    // A node killed with -9 leaves `wait` when its lease expires (5 s):
    // until then it counts, and lags.
    c.kill9();
    let g = apply(
        &etcd,
        prefix,
        "b4.json",
        json!({"updates": [{"op": "insert", "rule": flow(5, 5555)}]}),
    )
    .to_string();
    let (w, code) = etcd.ctl(prefix, &["wait", &g, "--timeout", "2"]);
    assert_eq!(code, 1, "the dead node still holds its lease: {w}");
    let (w, code) = etcd.ctl(prefix, &["wait", &g, "--timeout", "20"]);
    assert_eq!(code, 0, "{w}");
    assert_eq!(w["nodes"], 2, "{w}");
    let (f, _) = etcd.ctl(prefix, &["fleet"]);
    let dead = f["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "edge-c")
        .cloned()
        .unwrap();
    assert_eq!(dead["live"], false, "{f}");
}

/// Applies `batch` to the fleet; returns the generation.
fn apply(etcd: &Etcd, prefix: &str, name: &str, batch: Value) -> i64 {
    let file = write_batch(&etcd.dir, name, batch);
    let (r, code) = etcd.ctl(prefix, &["apply", &file]);
    assert_eq!(code, 0, "{r}");
    r["generation"].as_i64().unwrap()
}

fn wait_for(etcd: &Etcd, prefix: &str, g: i64) {
    let (w, code) = etcd.ctl(prefix, &["wait", &g.to_string(), "--timeout", "30"]);
    assert_eq!(code, 0, "{w}");
}

#[test]
fn a_node_killed_while_batches_land_catches_up_revision_by_revision_or_by_resync() {
    let Some(etcd) = Etcd::start("kill9") else {
        return;
    };
    let prefix = "/cfdp/kill9";
    let a = Node::start(&etcd, prefix, "edge-a");
    let mut b = Node::start(&etcd, prefix, "edge-b");
    let g = apply(
        &etcd,
        prefix,
        "k0.json",
        json!({"updates": [{"op": "insert", "rule": flow(1, 1)}]}),
    );
    wait_for(&etcd, prefix, g);
    b.caught_up(g);
    let local = b.local_generation();

    // Killed; three batches land; restarted: its journal gives it its last
    // rules at once, and it replays the three revisions one by one from
    // the last it applied (three local batches, none skipped or repeated).
    b.kill9();
    let mut g = 0;
    for i in 0..3u16 {
        g = apply(
            &etcd,
            prefix,
            &format!("k{}.json", i + 1),
            json!({"updates": [{"op": "insert", "rule": flow(10 + u32::from(i), 10 + i)}]}),
        );
    }
    b.restart();
    assert_eq!(b.rules().len(), 1, "the journal's rules, enforced at once");
    b.caught_up(g);
    let want = fleet_rules(&etcd, prefix);
    assert_eq!(want.len(), 4);
    assert_eq!(b.rules(), want);
    assert_eq!(a.rules(), want);
    assert_eq!(
        b.local_generation(),
        local + 3,
        "one local batch per revision"
    );

    // Killed again; two batches; etcd compacts its history past them: the
    // node resyncs — the difference as one atomic batch.
    b.kill9();
    apply(
        &etcd,
        prefix,
        "k4.json",
        json!({"updates": [{"op": "delete", "id": 1}]}),
    );
    let g = apply(
        &etcd,
        prefix,
        "k5.json",
        json!({"updates": [{"op": "modify", "rule": flow(10, 999)}]}),
    );
    etcd.client().compact(g).unwrap();
    b.restart();
    b.caught_up(g);
    let want = fleet_rules(&etcd, prefix);
    assert_eq!(want.len(), 3);
    assert_eq!(b.rules(), want);
    assert_eq!(b.local_generation(), local + 4, "the resync is one batch");
}

#[test]
fn nodes_keep_forwarding_while_etcd_is_down_and_catch_up_when_it_returns() {
    let Some(mut etcd) = Etcd::start("outage") else {
        return;
    };
    let prefix = "/cfdp/outage";
    let a = Node::start(&etcd, prefix, "edge-a");
    let b = Node::start(&etcd, prefix, "edge-b");
    let g = apply(
        &etcd,
        prefix,
        "o0.json",
        json!({"updates": [{"op": "insert", "rule": flow(1, 1)}]}),
    );
    wait_for(&etcd, prefix, g);

    etcd.kill();
    // Still forwarding, still answering, and saying etcd is gone.
    let start = Instant::now();
    loop {
        let s = a.call("stats", json!({}))["result"].clone();
        if !s["cluster"]["error"].is_null() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no error reported: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = a.packets();
    let start = Instant::now();
    while a.packets() <= before {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the node stopped forwarding without etcd"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.rules().len(), 1, "the node lost its rules without etcd");

    // etcd returns: the nodes reconnect and follow new batches.
    assert!(etcd.spawn(), "etcd did not come back");
    let g = apply(
        &etcd,
        prefix,
        "o1.json",
        json!({"updates": [{"op": "insert", "rule": flow(2, 2)}]}),
    );
    a.caught_up(g);
    b.caught_up(g);
    let want = fleet_rules(&etcd, prefix);
    assert_eq!(a.rules(), want);
    assert_eq!(b.rules(), want);
    let s = a.call("stats", json!({}))["result"].clone();
    assert!(s["cluster"]["error"].is_null(), "{s}");
}

#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn concurrent_controllers_cannot_both_win_and_batches_are_checked() {
    let Some(etcd) = Etcd::start("race") else {
        return;
    };
    let prefix = "/cfdp/race";
    // Two controllers insert rule 7 with different matches at once, many
    // times: each round exactly one wins.
    for round in 0..8u16 {
        let f1 = write_batch(
            &etcd.dir,
            "x.json",
            json!({"updates": [{"op": "insert", "rule": flow(1000 + u32::from(round), 1000 + round)}]}),
        );
        let f2 = write_batch(
            &etcd.dir,
            "y.json",
            json!({"updates": [{"op": "insert", "rule": flow(1000 + u32::from(round), 2000 + round)}]}),
        );
        let (r1, r2) = std::thread::scope(|s| {
            let h1 = s.spawn(|| etcd.ctl(prefix, &["apply", &f1]));
            let h2 = s.spawn(|| etcd.ctl(prefix, &["apply", &f2]));
            (h1.join().unwrap(), h2.join().unwrap())
        });
        let won = [&r1.0, &r2.0]
            .iter()
            .filter(|r| r["applied"] == true)
            .count();
        assert_eq!(won, 1, "round {round}: {r1:?} {r2:?}");
        let lost = if r1.0["applied"] == true {
            &r2.0
        } else {
            &r1.0
        };
        assert_eq!(lost["results"][0]["code"], "already_exists", "{lost}");
    }
    assert_eq!(fleet_rules(&etcd, prefix).len(), 8);

    // A match may be used once: a second rule with rule 1000's match fails,
    // and all-or-nothing writes none of its batch.
    let (got, code) = etcd.ctl(prefix, &["get", "1000"]);
    assert_eq!(code, 0, "{got}");
    let f = write_batch(
        &etcd.dir,
        "dup.json",
        json!({"updates": [{"op": "insert", "rule": flow(1, 5555)},
                           {"op": "insert", "rule": {"id": 2, "match": got["rule"]["match"],
                                                     "action": "allow"}}]}),
    );
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["applied"], false);
    assert_eq!(r["results"][0]["code"], "aborted");
    assert_eq!(r["results"][1]["code"], "already_exists");
    assert_eq!(fleet_rules(&etcd, prefix).len(), 8);

    // Two controllers that both read generation G and send a batch for
    // it: exactly one wins, the other is told the generation moved.
    for round in 0..6u32 {
        let (f_now, _) = etcd.ctl(prefix, &["fleet"]);
        let g = f_now["generation"].as_i64().unwrap();
        let fa = write_batch(
            &etcd.dir,
            "ga.json",
            json!({"expected_generation": g,
            "updates": [{"op": "insert", "rule": flow(3000 + 2 * round, 4000 + 2 * round as u16)}]}),
        );
        let fb = write_batch(
            &etcd.dir,
            "gb.json",
            json!({"expected_generation": g,
            "updates": [{"op": "insert", "rule": flow(3001 + 2 * round, 4001 + 2 * round as u16)}]}),
        );
        let (ra, rb) = std::thread::scope(|s| {
            let a = s.spawn(|| etcd.ctl(prefix, &["apply", &fa]));
            let b = s.spawn(|| etcd.ctl(prefix, &["apply", &fb]));
            (a.join().unwrap(), b.join().unwrap())
        });
        let won: Vec<&(Value, i32)> = [&ra, &rb].into_iter().filter(|r| r.1 == 0).collect();
        assert_eq!(won.len(), 1, "round {round}: {ra:?} {rb:?}");
        let lost = if ra.1 == 0 { &rb.0 } else { &ra.0 };
        assert!(
            lost["error"]
                .as_str()
                .is_some_and(|e| e.contains("expected_generation")),
            "{lost}"
        );
    }
    let base = fleet_rules(&etcd, prefix).len();
    assert_eq!(base, 8 + 6);
    // The ids the race rounds added, removed again for the checks below.
    let losers: Vec<Value> = fleet_rules(&etcd, prefix)
        .iter()
        .filter(|r| r["id"].as_u64() >= Some(3000))
        .map(|r| json!({"op": "delete", "id": r["id"]}))
        .collect();
    let f = write_batch(&etcd.dir, "cleanup.json", json!({ "updates": losers }));
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 0, "{r}");

    // expected_generation is a compare too.
    let (f_now, _) = etcd.ctl(prefix, &["fleet"]);
    let g = f_now["generation"].as_i64().unwrap();
    let f = write_batch(
        &etcd.dir,
        "stale.json",
        json!({"updates": [{"op": "delete", "id": 1000}],
        "expected_generation": g - 1}),
    );
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 1, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("expected_generation"),
        "{r}"
    );
    let f = write_batch(
        &etcd.dir,
        "fresh.json",
        json!({"updates": [{"op": "delete", "id": 1000}],
        "expected_generation": g}),
    );
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 0, "{r}");

    // A batch too big for one etcd transaction is refused whole, saying
    // which limit and how to raise it.
    let updates: Vec<Value> = (0..100u32)
        .map(|i| json!({"op": "insert", "rule": flow(5000 + i, 30000 + i as u16)}))
        .collect();
    let f = write_batch(&etcd.dir, "big.json", json!({ "updates": updates }));
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 1, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("--max-txn-ops"),
        "{r}"
    );
    assert_eq!(
        fleet_rules(&etcd, prefix).len(),
        7,
        "nothing of it was written"
    );
    // The same batch, in three parts, goes through.
    for (i, part) in updates.chunks(40).enumerate() {
        let f = write_batch(
            &etcd.dir,
            &format!("part{i}.json"),
            json!({ "updates": part }),
        );
        let (r, code) = etcd.ctl(prefix, &["apply", &f]);
        assert_eq!(code, 0, "{r}");
    }
    assert_eq!(fleet_rules(&etcd, prefix).len(), 107);

    // Bad input: a clear error, nothing written.
    let f = write_batch(
        &etcd.dir,
        "bad.json",
        json!({"updates": [{"op": "insert", "rule":
        {"id": 1, "match": {"flow": {"src": "10.0.0.1"}}, "action": "drop"}}]}),
    );
    let (r, code) = etcd.ctl(prefix, &["apply", &f]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["results"][0]["code"], "invalid_argument", "{r}");
    assert_eq!(fleet_rules(&etcd, prefix).len(), 107);
}

#[test]
fn replace_sets_the_fleet_to_a_desired_rule_set_in_one_batch() {
    let Some(etcd) = Etcd::start("replace") else {
        return;
    };
    let prefix = "/cfdp/replace";
    let a = Node::start(&etcd, prefix, "edge-a");
    // A node in filter-only mode follows too (its local batches are
    // all-or-nothing: that mode cannot publish one as a single switch).
    let b = Node::start_with(&etcd, prefix, "edge-b", |c| {
        c.dataplane.mode = Mode::FilterOnly;
    });
    let g = apply(
        &etcd,
        prefix,
        "r0.json",
        json!({"updates": [{"op": "insert", "rule": flow(1, 1)},
                           {"op": "insert", "rule": flow(2, 2)},
                           {"op": "insert", "rule": flow(3, 3)}]}),
    );
    a.caught_up(g);
    let local = a.local_generation();
    // 1 stays, 2 changes its action, 3 goes, 4 comes; 5 takes 3's match.
    let mut two = flow(2, 2);
    two["action"] = json!("allow");
    let desired = json!({"rules": [flow(1, 1), two, flow(4, 4), flow(5, 3)]});
    let file = write_batch(&etcd.dir, "desired.json", desired.clone());
    let (r, code) = etcd.ctl(prefix, &["replace", &file]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["replace"],
        json!({"inserted": 2, "modified": 1, "deleted": 1, "unchanged": 1}),
        "{r}"
    );
    let g = r["generation"].as_i64().unwrap();
    a.caught_up(g);
    b.caught_up(g);
    let want: Vec<Value> = desired["rules"].as_array().unwrap().clone();
    let got = fleet_rules(&etcd, prefix);
    assert_eq!(got.len(), 4);
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w["id"], g["id"]);
        assert_eq!(w["action"], g["action"]);
    }
    assert_eq!(a.rules(), got);
    assert_eq!(b.rules(), got);
    assert_eq!(a.local_generation(), local + 1, "one local batch");
    // Again: nothing to do.
    let (r, code) = etcd.ctl(prefix, &["replace", &file]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["generation"].as_i64(), Some(g), "{r}");
    assert_eq!(r["replace"]["unchanged"], 4);
}

/// Something other than cfdp writes garbage under the rules' prefix: the
/// nodes keep their rules and forward, say what is wrong, and follow again
/// once it is gone; `ctl rules` lists it as invalid (exit 1).
#[test]
fn a_value_that_is_not_a_rule_is_reported_not_applied() {
    let Some(etcd) = Etcd::start("garbage") else {
        return;
    };
    let prefix = "/cfdp/garbage";
    let a = Node::start(&etcd, prefix, "edge-a");
    let g = apply(
        &etcd,
        prefix,
        "g0.json",
        json!({"updates": [{"op": "insert", "rule": flow(1, 1)}]}),
    );
    a.caught_up(g);
    let mut raw = etcd.client();
    let bad = format!("{prefix}/rules/0000000099");
    raw.put(&bad, "{\"id\": 99, \"match\": \"everything\"}", 0)
        .unwrap();
    let start = Instant::now();
    loop {
        let s = a.call("stats", json!({}))["result"]["cluster"].clone();
        if s["error"]
            .as_str()
            .is_some_and(|e| e.contains("0000000099"))
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no error: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.rules().len(), 1, "the node kept its rules");
    let (r, code) = etcd.ctl(prefix, &["rules"]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["invalid"][0]["key"], bad.as_str(), "{r}");
    // Gone again: the node follows the next batch.
    raw.delete(&bad).unwrap();
    let g = apply(
        &etcd,
        prefix,
        "g1.json",
        json!({"updates": [{"op": "insert", "rule": flow(2, 2)}]}),
    );
    a.caught_up(g);
    assert_eq!(a.rules(), fleet_rules(&etcd, prefix));
    assert!(a.call("stats", json!({}))["result"]["cluster"]["error"].is_null());
}

/// Multi-field rules (with priorities) through the fleet: two rules share a
/// match at different priorities, a third with the same match and priority
/// is refused by the fleet's transaction as a node would refuse it, a
/// modify changes a priority, and both nodes (verify and filter-only) hold
/// exactly the fleet's rules, priorities included.
#[test]
fn multi_field_rules_follow_the_fleet() {
    let Some(etcd) = Etcd::start("acl") else {
        return;
    };
    let prefix = "/cfdp/acl";
    let a = Node::start(&etcd, prefix, "edge-a");
    let b = Node::start_with(&etcd, prefix, "edge-b", |c| {
        c.dataplane.mode = Mode::FilterOnly;
    });
    let acl = |id: u32, priority: u32, action: &str| {
        json!({"id": id, "priority": priority, "match": {"src_prefix": "10.0.0.0/8",
            "dst_prefix": "192.168.0.0/16", "proto": "tcp", "dport": "80-90"}, "action": action})
    };
    let g = apply(
        &etcd,
        prefix,
        "m0.json",
        json!({"updates": [{"op": "insert", "rule": acl(1, 10, "drop")},
                           {"op": "insert", "rule": acl(2, 20, "allow")},
                           {"op": "insert", "rule": flow(3, 3)}]}),
    );
    a.caught_up(g);
    b.caught_up(g);
    let file = write_batch(
        &etcd.dir,
        "m1.json",
        json!({"updates": [{"op": "insert", "rule": acl(4, 10, "count")}]}),
    );
    let (out, code) = etcd.ctl(prefix, &["apply", &file]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["results"][0]["code"], "already_exists", "{out}");
    let g = apply(
        &etcd,
        prefix,
        "m2.json",
        json!({"updates": [{"op": "modify", "rule": acl(1, 30, "drop")}]}),
    );
    a.caught_up(g);
    b.caught_up(g);
    let want: Vec<Value> = fleet_rules(&etcd, prefix).iter().map(rule_fields).collect();
    assert_eq!(want.len(), 3);
    assert_eq!(want[0]["priority"], 30, "{want:?}");
    assert_eq!(a.rules(), want);
    assert_eq!(b.rules(), want);
}

/// PEM files for a TLS fleet: a CA, etcd's server certificate for
/// 127.0.0.1, and a client certificate whose common name is `root` (with
/// etcd's authentication on, a client certificate without a password acts
/// as the user its common name names).
struct Pki {
    ca: PathBuf,
    server: PathBuf,
    server_key: PathBuf,
    client: PathBuf,
    client_key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "cfdp test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = |cn: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf(
        "etcd",
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client, client_key) = leaf("root", vec![], ExtendedKeyUsagePurpose::ClientAuth);
    let write = |name: &str, text: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", &ca_cert.pem()),
        server: write("server.pem", &server),
        server_key: write("server-key.pem", &server_key),
        client: write("client.pem", &client),
        client_key: write("client-key.pem", &client_key),
    }
}

/// The security review's item 7: a fleet whose etcd serves TLS only to
/// clients with a certificate of the fleet's CA, with etcd's own
/// authentication on and the nodes' user granted the fleet's prefix alone.
/// A node and `cfdp ctl` with certificate and user work; without a client
/// certificate, or with another prefix, they are refused.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn a_fleet_over_tls_with_client_certificates_and_an_etcd_user() {
    let Some(plain) = Etcd::start("tls") else {
        return;
    };
    let dir = plain.dir.to_path_buf();
    let p = pki(&dir);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let server = EtcdServer::start_tls(
        &dir,
        &[
            "--cert-file",
            &s(&p.server),
            "--key-file",
            &s(&p.server_key),
            "--trusted-ca-file",
            &s(&p.ca),
            "--client-cert-auth",
        ],
    )
    .unwrap();
    let url = server.url.clone();
    let etcd = Etcd {
        url: url.clone(),
        server,
        dir: cfdp_testkit::dirs::test_dir("etcd-tls-nodes"),
    };
    let etcdctl = |args: &[&str]| {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &url, "--cacert", &s(&p.ca)])
            .args(["--cert", &s(&p.client), "--key", &s(&p.client_key)])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    etcdctl(&["user", "add", "root", "--new-user-password", "root-pw"]);
    etcdctl(&["user", "grant-role", "root", "root"]);
    etcdctl(&["role", "add", "fleet"]);
    etcdctl(&[
        "role",
        "grant-permission",
        "fleet",
        "--prefix=true",
        "readwrite",
        "/cfdp/tls/",
    ]);
    etcdctl(&["user", "add", "node", "--new-user-password", "node-pw"]);
    etcdctl(&["user", "grant-role", "node", "fleet"]);
    etcdctl(&["auth", "enable"]);
    let pw = etcd.dir.join("node.password");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&pw, "node-pw\n").unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let secure = [
        "--etcd-ca".to_string(),
        s(&p.ca),
        "--etcd-cert".into(),
        s(&p.client),
        "--etcd-key".into(),
        s(&p.client_key),
        "--etcd-user".into(),
        "node".into(),
        "--etcd-password-file".into(),
        s(&pw),
    ];
    let batch = write_batch(
        &etcd.dir,
        "tls",
        json!({"updates": [{"op": "insert", "rule": flow(1, 1000)}]}),
    );
    let ctl = |prefix: &str, extra: &[String], args: &[&str]| {
        let mut all: Vec<&str> = extra.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        etcd.ctl(prefix, &all)
    };
    // With certificate and user, on the fleet's prefix: applied.
    let (r, code) = ctl("/cfdp/tls", &secure, &["apply", &batch]);
    assert_eq!(code, 0, "{r}");
    let g = r["generation"].as_i64().unwrap();
    // Another prefix: etcd refuses the user.
    let (r, code) = ctl("/cfdp/other", &secure, &["apply", &batch]);
    assert_ne!(code, 0, "{r}");
    // No client certificate: the TLS handshake fails.
    let (r, code) = ctl("/cfdp/tls", &secure[..2], &["rules"]);
    assert_ne!(code, 0, "{r}");
    // A node with the same settings in its [cluster] section follows.
    let mut node = Node::start_with(&etcd, "/cfdp/tls", "tls-node", |c| {
        let k = &mut c.cluster;
        k.ca_file = p.ca.display().to_string();
        k.cert_file = p.client.display().to_string();
        k.key_file = p.client_key.display().to_string();
        k.user = "node".into();
        k.password_file = pw.display().to_string();
    });
    node.caught_up(g);
    assert_eq!(node.rules(), fleet_rules_with(&etcd, "/cfdp/tls", &secure));
    node.stop();
    drop(plain);
}

/// The fleet's rules as `cfdp ctl --etcd … rules` lists them, with
/// `extra` flags (TLS, user).
fn fleet_rules_with(etcd: &Etcd, prefix: &str, extra: &[String]) -> Vec<Value> {
    let mut args: Vec<&str> = extra.iter().map(String::as_str).collect();
    args.push("rules");
    let (r, code) = etcd.ctl(prefix, &args);
    assert_eq!(code, 0, "{r}");
    r["rules"].as_array().unwrap().clone()
}

/// A node's agent applies the fleet's revisions and resyncs whatever their
/// size: its socket's `max_batch` bounds requests, not the fleet (a 100 k
/// update resync refused by a 64 k `max_batch` left a node behind for
/// good). Here a node with `max_batch = 4` follows a 6-update batch.
#[test]
fn a_node_follows_batches_larger_than_its_max_batch() {
    let Some(etcd) = Etcd::start("bound") else {
        return;
    };
    let prefix = "/cfdp/bound";
    let mut n = Node::start(&etcd, prefix, "small");
    n.stop();
    // The same node's configuration again, its socket's batches bounded.
    node_config(&etcd.dir, &etcd.url, prefix, "small", |c| {
        c.control.max_batch = 4;
    });
    n.restart();
    let updates: Vec<Value> = (1..=6)
        .map(|i| json!({"op": "insert", "rule": flow(i, 1000 + i as u16)}))
        .collect();
    let g = apply(&etcd, prefix, "six", json!({ "updates": updates }));
    n.caught_up(g);
    assert_eq!(n.rules().len(), 6);
    n.stop();
}
