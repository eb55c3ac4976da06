//! The control path end to end, as a controller sees it: a real `cfdp run`
//! (the binary beside this one: `cargo build --release -p cfdp -p
//! cfdp-bench`) looping a capture with one worker, a `state_dir` on disk
//! (journal with fsync), rule batches over one persistent Unix-socket
//! connection.
//!
//! 1. Latency: the flow filter is filled to 97 % of its cuckoo entries,
//!    then each trial sends a batch of 1024 flow-rule inserts (timed) and a
//!    batch deleting them again (timed separately), so every insert batch
//!    meets the same occupancy; and single-update insert / delete batches.
//!    The worker replays at 100 k frames/s. Reported: socket round trip
//!    p50 / p99 / max, and the server's own breakdown (parse, validate,
//!    filter, journal write, sync, publish) from each response's `timing`;
//!    the rest of the round trip is the response's serialization, the
//!    socket and the client's parse of the response (the request line is
//!    prepared before the clock starts, as a controller's would be).
//! 2. Sustained: batches of 1024 (inserts, then deletes of the same rules)
//!    sent back to back through one connection, 8 in flight, against a
//!    worker replaying as fast as it can; updates/s, and the worker's
//!    packets/s during the churn against quiet windows before and after.
//! 3. `cfdp ctl` start-up: a `cfdp ctl ping` process against the same ping
//!    over an open connection.
//!
//! `--cfdp PATH` measures another build (e.g. an older tree) with the same
//! client. Output: tables, `bench/results/control_path.csv` (quick:
//! `bench/results/quick/`). Run: `cargo run --release -p cfdp-bench --bin
//! control-path [-- --quick] [-- --cfdp PATH --label NAME]`.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_bench::{
    arg, bench_flow, cfdp_binary, is_quick, machine_description, results_path, spawn_cfdp_run,
    write_csv,
};
use serde_json::{json, Value};

fn flow_rule(i: u64) -> Value {
    let k = bench_flow(i);
    json!({"id": i, "match": {"flow": {
        "src": k.src_ip().to_string(), "dst": k.dst_ip().to_string(),
        "proto": "udp", "sport": k.sport, "dport": k.dport}},
        "action": if i.is_multiple_of(2) { "drop" } else { "allow" }})
}

fn inserts(ids: std::ops::Range<u64>) -> Value {
    let ups: Vec<Value> = ids
        .map(|i| json!({"op": "insert", "rule": flow_rule(i)}))
        .collect();
    json!({ "updates": ups })
}

fn deletes(ids: std::ops::Range<u64>) -> Value {
    let ups: Vec<Value> = ids.map(|i| json!({"op": "delete", "id": i})).collect();
    json!({ "updates": ups })
}

/// One connection speaking the protocol, with pipelining.
struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
    next: u64,
    /// The answer's text, reused: a fresh `String` growing to 15 KB inside
    /// the timed read made glibc consolidate the thousands of small blocks
    /// freed when the request line was built (the request's JSON tree),
    /// ~0.3–0.5 ms charged to "reading the answer" that was the client's
    /// own allocator, not the server.
    text: String,
}

impl Conn {
    fn open(path: &Path) -> Conn {
        let s = UnixStream::connect(path).expect("connect");
        Conn {
            r: BufReader::new(s.try_clone().expect("clone")),
            w: s,
            next: 0,
            text: String::with_capacity(1 << 20),
        }
    }

    /// The request line (a controller has it ready before it sends).
    fn line(&mut self, method: &str, params: &Value) -> String {
        self.next += 1;
        let mut line = json!({"id": self.next, "method": method, "params": params}).to_string();
        line.push('\n');
        line
    }

    fn send_line(&mut self, line: &str) {
        self.w.write_all(line.as_bytes()).expect("write");
    }

    fn send(&mut self, method: &str, params: &Value) {
        let line = self.line(method, params);
        self.send_line(&line);
    }

    /// Sends a prepared line and waits for its answer, timed from the write
    /// to the parsed response.
    ///
    /// Also returns the client's side of it, µs: writing the request,
    /// waiting for the first byte of the answer, reading the rest of the
    /// line, parsing it.
    fn timed(&mut self, line: &str) -> (Duration, Value, [(&'static str, f64); 4]) {
        let t = Instant::now();
        self.send_line(line);
        let written = t.elapsed();
        self.r.fill_buf().expect("read");
        let first = t.elapsed();
        self.text.clear();
        self.r.read_line(&mut self.text).expect("read");
        let read = t.elapsed();
        let v: Value = serde_json::from_str(&self.text).expect("response is JSON");
        assert!(v.get("error").is_none(), "server error: {v}");
        let total = t.elapsed();
        let us = |a: Duration, b: Duration| (b - a).as_secs_f64() * 1e6;
        let client = [
            ("client_write_us", us(Duration::ZERO, written)),
            ("client_wait_us", us(written, first)),
            ("client_read_us", us(first, read)),
            ("client_parse_us", us(read, total)),
        ];
        (total, v["result"].clone(), client)
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read");
        let v: Value = serde_json::from_str(&line).expect("response is JSON");
        assert!(v.get("error").is_none(), "server error: {v}");
        v["result"].clone()
    }

    fn call(&mut self, method: &str, params: &Value) -> Value {
        self.send(method, params);
        self.recv()
    }
}

struct Server {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
}

impl Server {
    fn start(cfdp: &Path, dir: &Path, pps: u64) -> Server {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("mkdir");
        let socket = dir.join("ctl.sock");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let cfg = dir.join("cfdp.toml");
        std::fs::write(
            &cfg,
            format!(
                "[dataplane]\nworkers = 1\n[pcap]\ninput = {:?}\nloop = true\npps = {pps}\n\
                 [rules]\nfile = \"\"\n[control]\nsocket = {:?}\nstate_dir = {:?}\n\
                 compact_every = 1000000\n",
                repo.join("pcap/mixed.pcap"),
                socket,
                dir.join("state"),
            ),
        )
        .expect("config");
        let child = spawn_cfdp_run(cfdp, &cfg);
        let start = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "cfdp did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child,
            socket,
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Fills the flow filter to `target` occupancy of its cuckoo entries.
fn fill(c: &mut Conn, target: f64) -> u64 {
    let mut next = 0u64;
    loop {
        let st = c.call("stats", &json!({}));
        let f = &st["filter"];
        let occ = f["occupancy"].as_f64().unwrap_or(0.0);
        let buckets = f["filters"]["flow"]["buckets"]
            .as_u64()
            .expect("flow filter");
        let slots = buckets * 4;
        let want = (target * slots as f64) as u64;
        let have = (occ * slots as f64) as u64;
        if have >= want {
            return next;
        }
        // Near the top, let migration bring Bloom-part items back into
        // entries first (the idle control thread does it too).
        c.call("migrate", &json!({}));
        // Smaller steps near the target: migration afterwards moves
        // Bloom-part items into entries and would overshoot.
        let left = want - have;
        let n = if left > 16_384 {
            8192
        } else {
            (left / 2).max(64)
        };
        let r = c.call("apply", &inserts(next..next + n));
        assert_eq!(r["applied"], true, "fill batch");
        next += n;
    }
}

#[derive(Default)]
struct Series {
    rtt_ms: Vec<f64>,
    server_ms: Vec<f64>,
    /// Median of each timing field, µs.
    stages: Vec<(String, Vec<f64>)>,
}

impl Series {
    fn record(&mut self, rtt: Duration, result: &Value, client: &[(&'static str, f64)]) {
        for &(k, v) in client {
            match self.stages.iter_mut().find(|(n, _)| n == k) {
                Some((_, s)) => s.push(v),
                None => self.stages.push((k.to_string(), vec![v])),
            }
        }
        self.rtt_ms.push(rtt.as_secs_f64() * 1e3);
        self.server_ms
            .push(result["wall_us"].as_f64().unwrap_or(0.0) / 1e3);
        if let Some(t) = result["timing"].as_object() {
            for (k, v) in t {
                let v = v.as_f64().unwrap_or(0.0);
                match self.stages.iter_mut().find(|(n, _)| n == k) {
                    Some((_, s)) => s.push(v),
                    None => self.stages.push((k.clone(), vec![v])),
                }
            }
        }
    }
}

fn main() {
    let quick = is_quick();
    let label = arg("--label").unwrap_or_else(|| "this".into());
    let cfdp = cfdp_binary();
    let trials = if quick { 20 } else { 100 };
    let base = std::env::temp_dir().join(format!("cfdp-ctlpath-{}", std::process::id()));
    println!("machine: {}", machine_description());
    println!("cfdp: {} ({label})", cfdp.display());

    // 1. Latency at 97 %.
    let srv = Server::start(&cfdp, &base.join("lat"), 100_000);
    let mut c = Conn::open(&srv.socket);
    let installed = fill(&mut c, 0.97);
    let occ = c.call("stats", &json!({}))["filter"]["occupancy"].clone();
    println!("flow filter filled with {installed} rules: occupancy {occ}");
    let mut ins = Series::default();
    let mut del = Series::default();
    let mut next = installed;
    for _ in 0..trials {
        let line = c.line("apply", &inserts(next..next + 1024));
        let (rtt, r, client) = c.timed(&line);
        ins.record(rtt, &r, &client);
        assert_eq!(r["applied"], true, "insert batch: {r}");
        let line = c.line("apply", &deletes(next..next + 1024));
        let (rtt, r, client) = c.timed(&line);
        del.record(rtt, &r, &client);
        assert_eq!(r["applied"], true, "delete batch");
        next += 1024;
    }
    let mut one = Series::default();
    for _ in 0..trials * 2 {
        let line = c.line("apply", &inserts(next..next + 1));
        let (rtt, r, client) = c.timed(&line);
        one.record(rtt, &r, &client);
        let line = c.line("apply", &deletes(next..next + 1));
        let (rtt, r, client) = c.timed(&line);
        one.record(rtt, &r, &client);
        next += 1;
    }
    // 3. cfdp ctl against an open connection.
    let mut ping_ms = Vec::new();
    let mut ctl_ms = Vec::new();
    for _ in 0..if quick { 5 } else { 20 } {
        let t = Instant::now();
        c.call("ping", &json!({}));
        ping_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let st = Command::new(&cfdp)
            .args(["ctl", "--socket"])
            .arg(&srv.socket)
            .arg("ping")
            .stdout(Stdio::null())
            .status()
            .expect("cfdp ctl");
        assert!(st.success());
        ctl_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(c);
    drop(srv);

    // 2. Sustained churn against a worker at full speed.
    let srv = Server::start(&cfdp, &base.join("sus"), 0);
    let mut c = Conn::open(&srv.socket);
    let window = Duration::from_secs_f64(if quick { 0.5 } else { 2.0 });
    let pkts = |c: &mut Conn| {
        c.call("stats", &json!({}))["totals"]["packets"]
            .as_u64()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let rate = |c: &mut Conn| {
        let (p0, t0) = (pkts(c), Instant::now());
        std::thread::sleep(window);
        (pkts(c) - p0) as f64 / t0.elapsed().as_secs_f64()
    };
    let quiet_before = rate(&mut c);
    let batches = if quick { 40 } else { 400 };
    let in_flight = 8;
    let mut sent = 0u64;
    let mut done = 0u64;
    let mut next = 1u64 << 30;
    let mut pending_deletes: std::collections::VecDeque<u64> = Default::default();
    let p0 = pkts(&mut c);
    let t0 = Instant::now();
    while done < batches {
        while sent < batches && sent - done < in_flight {
            let b = if sent.is_multiple_of(2) {
                pending_deletes.push_back(next);
                next += 1024;
                inserts(next - 1024..next)
            } else {
                let s = pending_deletes.pop_front().expect("inserted first");
                deletes(s..s + 1024)
            };
            c.send("apply", &b);
            sent += 1;
        }
        let r = c.recv();
        assert_eq!(r["applied"], true, "sustained batch");
        done += 1;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let p1 = pkts(&mut c);
    let updates_per_s = (batches * 1024) as f64 / elapsed;
    let churn_pps = (p1 - p0) as f64 / elapsed;
    let quiet_after = rate(&mut c);
    let quiet = (quiet_before + quiet_after) / 2.0;
    drop(c);
    drop(srv);

    // Report.
    let mut rows = Vec::new();
    println!(
        "\n1024-insert batches into a 97 %-full flow filter, journal fsynced, {trials} trials:"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} | server p50 {:>7}",
        "", "rtt p50", "rtt p99", "rtt max", "ms"
    );
    for (name, s) in [
        ("insert 1024", &mut ins),
        ("delete 1024", &mut del),
        ("single update", &mut one),
    ] {
        let (p50, p99, max) = (
            quantile(&mut s.rtt_ms, 0.5),
            quantile(&mut s.rtt_ms, 0.99),
            quantile(&mut s.rtt_ms, 1.0),
        );
        let sp50 = quantile(&mut s.server_ms, 0.5);
        println!("{name:<22} {p50:>8.3}  {p99:>8.3}  {max:>8.3} | {sp50:>17.3}");
        let mut stages = String::new();
        for (k, v) in &mut s.stages {
            let m = quantile(v, 0.5);
            stages += &format!(" {k}={m:.0}");
            rows.push(format!("{label},{name},stage_{k}_p50,{m:.0}"));
        }
        println!("{:<22} stages, µs p50:{stages}", "");
        rows.push(format!("{label},{name},rtt_ms_p50,{p50:.3}"));
        rows.push(format!("{label},{name},rtt_ms_p99,{p99:.3}"));
        rows.push(format!("{label},{name},rtt_ms_max,{max:.3}"));
        rows.push(format!("{label},{name},server_ms_p50,{sp50:.3}"));
    }
    let (ping, ctl) = (quantile(&mut ping_ms, 0.5), quantile(&mut ctl_ms, 0.5));
    println!(
        "\nping over an open connection {ping:.3} ms; `cfdp ctl ping` process {ctl:.3} ms \
         (adds {:.3} ms)",
        ctl - ping
    );
    rows.push(format!("{label},ctl,ping_ms_p50,{ping:.3}"));
    rows.push(format!("{label},ctl,ctl_process_ms_p50,{ctl:.3}"));
    println!(
        "sustained: {batches} batches of 1024 through one connection ({in_flight} in flight): \
         {updates_per_s:.0} updates/s; worker {:.2} Mpps during churn vs {:.2} quiet ({:+.1} %)",
        churn_pps / 1e6,
        quiet / 1e6,
        (churn_pps / quiet - 1.0) * 100.0
    );
    rows.push(format!(
        "{label},sustained,updates_per_s,{updates_per_s:.0}"
    ));
    rows.push(format!(
        "{label},sustained,worker_mpps_churn,{:.3}",
        churn_pps / 1e6
    ));
    rows.push(format!(
        "{label},sustained,worker_mpps_quiet,{:.3}",
        quiet / 1e6
    ));
    // Under --quick, results_path puts it in bench/results/quick/.
    let path = results_path("control_path.csv");
    let this = format!(
        "# label {label}: {} | {} | cfdp {}",
        std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%dT%H:%MZ")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        machine_description(),
        cfdp.display()
    );
    // Keep other labels' rows and their run lines (an A/B run writes one
    // label per build).
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let mut labels: Vec<String> = old
        .lines()
        .filter(|l| l.starts_with("# label ") && !l.starts_with(&format!("# label {label}:")))
        .map(String::from)
        .collect();
    labels.push(this);
    let header = format!("{}\nlabel,what,metric,value", labels.join("\n"));
    let mut keep: Vec<String> = old
        .lines()
        .skip_while(|l| l.starts_with('#') || l.starts_with("label,"))
        .filter(|l| !l.starts_with(&format!("{label},")))
        .map(String::from)
        .collect();
    keep.extend(rows);
    write_csv(&path, &header, &keep).expect("write csv");
    println!("wrote {}", path.display());
}
