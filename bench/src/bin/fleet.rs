//! A fleet against a real etcd, as an operator times it: three `cfdp run`
//! nodes (pcap backend, looping, journal on), `cfdp ctl --etcd` as the
//! controller — process start-up included, as a script would see it.
//!
//! * apply → wait: a batch of 1, 64 or 1024 flow-rule inserts applied to
//!   the fleet (`ctl apply`), then `ctl wait G` until all three nodes have
//!   applied it; the two times and their sum, median and max;
//! * sustained: 1024-update batches back to back for a few seconds, then
//!   one `wait`: updates per second the fleet absorbed;
//! * catch-up: a node stopped while 100 k updates land, started again:
//!   time until it is caught up (replaying revision by revision from its
//!   last one), and the same after etcd compacted that history (resync).
//!
//! etcd runs with `--max-txn-ops 4096` (a 1024-update batch needs ~2050
//! operations; etcd's default of 128 would refuse it, and `cfdp ctl` says
//! so). Needs `etcd` (apt-get install etcd-server) and a cfdp built with
//! `--features etcd` (`--cfdp PATH`, default: beside this binary).
//!
//! Run: `cargo build --release -p cfdp --features etcd -p cfdp-bench &&
//! ./target/release/fleet [--quick]`; results: `results/fleet.csv`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_bench::{cfdp_binary, is_quick, machine_description, median, results_path, write_csv};
use cfdp_testkit::etcd::{node_config, EtcdServer};
use serde_json::{json, Value};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Fleet {
    cfdp: PathBuf,
    url: String,
    prefix: String,
    dir: PathBuf,
}

impl Fleet {
    fn ctl(&self, args: &[&str]) -> Value {
        let out = Command::new(&self.cfdp)
            .args(["ctl", "--etcd", &self.url, "--prefix", &self.prefix])
            .args(["--max-txn-ops", "4096", "--max-request-bytes", "10000000"])
            .args(args)
            .output()
            .expect("cfdp ctl");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Value =
            serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
        assert!(
            out.status.success(),
            "cfdp ctl {args:?}: {v} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        v
    }

    /// Applies `n` inserts starting at rule id `first`; returns the
    /// generation and the seconds `ctl apply` took.
    fn insert(&self, first: u64, n: u64) -> (i64, f64) {
        let updates: Vec<Value> = (first..first + n)
            .map(|i| {
                json!({"op": "insert", "rule": {"id": i, "match": {"flow": {
                    "src": format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
                    "dst": "192.0.2.1", "proto": "udp", "sport": 1000 + (i % 50000), "dport": 53}},
                    "action": "drop"}})
            })
            .collect();
        let file = self.dir.join("batch.json");
        std::fs::write(&file, json!({ "updates": updates }).to_string()).unwrap();
        let t = Instant::now();
        let r = self.ctl(&["apply", file.to_str().unwrap()]);
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(r["applied"], true, "{r}");
        (r["generation"].as_i64().unwrap(), secs)
    }

    fn wait(&self, g: i64) -> f64 {
        let t = Instant::now();
        self.ctl(&["wait", &g.to_string(), "--timeout", "600"]);
        t.elapsed().as_secs_f64()
    }
}

fn node_stats(dir: &Path, name: &str) -> Option<Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::os::unix::net::UnixStream::connect(dir.join(format!("{name}.sock"))).ok()?;
    s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stats\"}\n")
        .ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    serde_json::from_str::<Value>(&line)
        .ok()
        .map(|v| v["result"].clone())
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--cfdp"]);
    let quick = is_quick();
    let cfdp = cfdp_binary();
    let scratch = tempfile::Builder::new()
        .prefix("cfdp-fleet-bench-")
        .tempdir()
        .expect("a scratch directory");
    let dir = scratch.path().to_path_buf();
    let etcd = EtcdServer::start(
        &dir,
        &[
            "--max-txn-ops",
            "4096",
            "--max-request-bytes",
            "10000000",
            "--quota-backend-bytes",
            "8000000000",
        ],
    )
    .expect("etcd");
    let url = etcd.url.clone();
    let fleet = Fleet {
        cfdp: cfdp.clone(),
        url: url.clone(),
        prefix: "/bench".into(),
        dir: dir.clone(),
    };
    let names = ["n1", "n2", "n3"];
    let mut nodes: Vec<Option<Proc>> = names
        .iter()
        .map(|n| {
            let cfg = node_config(&dir, &url, "/bench", n, |_| {});
            Some(Proc(
                Command::new(&cfdp)
                    .args(["run", "--config"])
                    .arg(&cfg)
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("{n}.err"))).unwrap())
                    .spawn()
                    .expect("cfdp run"),
            ))
        })
        .collect();
    // All three live.
    let start = Instant::now();
    loop {
        let f = fleet.ctl(&["fleet"]);
        let live = f["nodes"]
            .as_array()
            .map_or(0, |v| v.iter().filter(|n| n["live"] == true).count());
        if live == 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nodes did not join: {f}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("machine: {}", machine_description());
    println!("3 nodes (pcap loop, journal on), etcd 3.4 on loopback; cfdp ctl processes");
    let mut rows = Vec::new();
    let mut next_id = 1u64;
    let reps = |n: u64| -> usize {
        match (quick, n) {
            (true, _) => 3,
            (false, 1024) => 10,
            (false, _) => 30,
        }
    };
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12}",
        "updates", "apply ms p50", "wait ms p50", "total p50", "total max"
    );
    for n in [1u64, 64, 1024] {
        let (mut a, mut w, mut t) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps(n) {
            let (g, apply_s) = fleet.insert(next_id, n);
            next_id += n;
            let wait_s = fleet.wait(g);
            a.push(apply_s * 1e3);
            w.push(wait_s * 1e3);
            t.push((apply_s + wait_s) * 1e3);
        }
        let max = t.iter().copied().fold(0.0, f64::max);
        let (ma, mw, mt) = (median(&mut a), median(&mut w), median(&mut t));
        println!("{n:>8} {ma:>12.1} {mw:>12.1} {mt:>12.1} {max:>12.1}");
        rows.push(format!("apply_wait,{n},{ma:.2},{mw:.2},{mt:.2},{max:.2}"));
    }
    // Sustained: back-to-back 1024-update batches, then one wait.
    let secs = if quick { 2.0 } else { 10.0 };
    let t = Instant::now();
    let mut total = 0u64;
    let mut g = 0;
    while t.elapsed().as_secs_f64() < secs {
        g = fleet.insert(next_id, 1024).0;
        next_id += 1024;
        total += 1024;
    }
    fleet.wait(g);
    let ups = total as f64 / t.elapsed().as_secs_f64();
    println!(
        "sustained: {total} updates in {:.1} s: {ups:.0} updates/s applied by all 3 nodes",
        t.elapsed().as_secs_f64()
    );
    rows.push(format!("sustained,{total},,,{ups:.0},"));

    // Catch-up: n3 stopped while `behind` updates land.
    let behind = if quick { 10_240 } else { 102_400 };
    for compact in [false, true] {
        drop(nodes[2].take()); // SIGKILL
        let mut g = 0;
        for _ in 0..behind / 1024 {
            g = fleet.insert(next_id, 1024).0;
            next_id += 1024;
        }
        if compact {
            // What an operator's auto-compaction does: history gone.
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &url, "compact", &g.to_string()])
                .output();
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                println!("catch-up after compaction: skipped (no etcdctl)");
                continue;
            }
        }
        let cfg = dir.join("n3.toml");
        let t = Instant::now();
        nodes[2] = Some(Proc(
            Command::new(&cfdp)
                .args(["run", "--config"])
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("n3-{compact}.err"))).unwrap())
                .spawn()
                .expect("cfdp run"),
        ));
        loop {
            if let Some(s) = node_stats(&dir, "n3") {
                if s["cluster"]["caught_up"] == true
                    && s["cluster"]["generation"].as_i64() >= Some(g)
                {
                    break;
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "n3 did not catch up; its log and state are in {}: {:?}",
                dir.display(),
                node_stats(&dir, "n3")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let secs = t.elapsed().as_secs_f64();
        let how = if compact { "resync" } else { "replay" };
        println!("catch-up ({how}): {behind} updates behind, caught up {secs:.2} s after start");
        rows.push(format!("catch_up_{how},{behind},,,{secs:.3},"));
    }
    drop(nodes);
    drop(etcd);
    drop(scratch);
    let path = results_path("fleet.csv");
    write_csv(
        &path,
        "kind,updates,apply_ms_p50,wait_ms_p50,total_ms_p50_or_value,total_ms_max",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
}
