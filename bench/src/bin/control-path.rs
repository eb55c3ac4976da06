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
//!    packets/s during the churn against quiet windows before and after —
//!    per second of wall time and per CPU-second of the worker thread (on
//!    a machine with fewer cores than busy threads the first mostly
//!    measures who gets the CPU). The request lines are built before the
//!    clock starts and answers are read into typed fields, as a controller
//!    would: the client shares this machine's cores with the server.
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

/// The `params` of a batch of flow-rule inserts, as JSON text written
/// directly (no JSON tree: freeing a tree of thousands of small blocks
/// left glibc a consolidation to do at the next larger allocation, 1.5–2
/// ms that landed inside the timed parse of the answer).
fn inserts(ids: std::ops::Range<u64>) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(160 * (ids.end - ids.start) as usize + 16);
    s.push_str("{\"updates\":[");
    for i in ids {
        let k = bench_flow(i);
        let action = if i.is_multiple_of(2) { "drop" } else { "allow" };
        let _ = write!(
            s,
            "{{\"op\":\"insert\",\"rule\":{{\"id\":{i},\"match\":{{\"flow\":{{\"src\":\"{}\",\
             \"dst\":\"{}\",\"proto\":\"udp\",\"sport\":{},\"dport\":{}}}}},\"action\":\"{action}\"}}}},",
            k.src_ip(),
            k.dst_ip(),
            k.sport,
            k.dport
        );
    }
    if s.ends_with(',') {
        s.pop();
    }
    s.push_str("]}");
    s
}

/// The `params` of a batch deleting `ids` (see [`inserts`]).
fn deletes(ids: std::ops::Range<u64>) -> String {
    use std::fmt::Write;
    let mut s = String::from("{\"updates\":[");
    for i in ids {
        let _ = write!(s, "{{\"op\":\"delete\",\"id\":{i}}},");
    }
    if s.ends_with(',') {
        s.pop();
    }
    s.push_str("]}");
    s
}

/// An `apply` answer, read the way a controller would read it: into typed
/// fields (every update's code checked), not into a JSON tree. A tree of
/// the 1024 results cost the client ~0.37 ms a batch, counted in the round
/// trip and, in the sustained run, competing with the server for this
/// 2-core machine.
#[derive(Debug)]
struct Applied {
    applied: bool,
    all_ok: bool,
    wall_us: u64,
    timing: Vec<(String, f64)>,
}

impl Applied {
    fn parse(text: &str) -> Applied {
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: Option<Report<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Report<'a> {
            applied: bool,
            wall_us: u64,
            #[serde(borrow)]
            results: Vec<Code<'a>>,
            #[serde(default, borrow)]
            timing: std::collections::BTreeMap<&'a str, f64>,
        }
        #[derive(serde::Deserialize)]
        struct Code<'a> {
            code: &'a str,
        }
        let a: Answer = serde_json::from_str(text).expect("response is JSON");
        let Some(r) = a.result else {
            panic!("server error: {}", text.trim_end());
        };
        Applied {
            applied: r.applied,
            all_ok: r.results.iter().all(|c| c.code == "ok"),
            wall_us: r.wall_us,
            timing: r
                .timing
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    fn check(&self, what: &str) {
        assert!(self.applied && self.all_ok, "{what}: {self:?}");
    }
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

    /// The request line (a controller has it ready before it sends);
    /// `params` is JSON text.
    fn line(&mut self, method: &str, params: &str) -> String {
        self.next += 1;
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{method}\",\"params\":{params}}}\n",
            self.next
        )
    }

    fn send_line(&mut self, line: &str) {
        self.w.write_all(line.as_bytes()).expect("write");
    }

    fn send(&mut self, method: &str, params: &Value) {
        let line = self.line(method, &params.to_string());
        self.send_line(&line);
    }

    /// Sends a prepared line and waits for its answer, timed from the write
    /// to the parsed response.
    ///
    /// Also returns the client's side of it, µs: writing the request,
    /// waiting for the first byte of the answer, reading the rest of the
    /// line, parsing it.
    fn timed(&mut self, line: &str) -> (Duration, Applied, [(&'static str, f64); 4]) {
        let t = Instant::now();
        self.send_line(line);
        let written = t.elapsed();
        self.r.fill_buf().expect("read");
        let first = t.elapsed();
        self.text.clear();
        self.r.read_line(&mut self.text).expect("read");
        let read = t.elapsed();
        let a = Applied::parse(&self.text);
        let total = t.elapsed();
        let us = |a: Duration, b: Duration| (b - a).as_secs_f64() * 1e6;
        let client = [
            ("client_write_us", us(Duration::ZERO, written)),
            ("client_wait_us", us(written, first)),
            ("client_read_us", us(first, read)),
            ("client_parse_us", us(read, total)),
        ];
        (total, a, client)
    }

    /// The next answer to an `apply`, parsed as a controller would.
    fn recv_applied(&mut self) -> Applied {
        self.text.clear();
        self.r.read_line(&mut self.text).expect("read");
        Applied::parse(&self.text)
    }

    /// The next answer, as a JSON tree (answers outside the timed paths).
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

/// A `cfdp run` with its files in a scratch directory of its own,
/// removed with it.
struct Server {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(cfdp: &Path, name: &str, pps: u64) -> Server {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("cfdp-ctlpath-{name}-"))
            .tempdir()
            .expect("a scratch directory");
        let dir = scratch.path();
        let socket = dir.join("ctl.sock");
        let cfg = dir.join("cfdp.toml");
        cfdp_bench::write_node_config(&cfg, pps, &socket, &dir.join("state"), |c| {
            c.control.compact_every = 1_000_000;
        });
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
            _dir: scratch,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// CPU seconds the server's worker threads (`cfdp-worker-N`) have used,
/// from `/proc` (utime + stime, in USER_HZ = 100 ticks a second, the /proc
/// ABI on x86 and arm64): the worker's packets per CPU-second separate what
/// the churn costs the worker's own work from what it costs by taking CPU
/// time away on a machine with fewer cores than busy threads.
fn worker_cpu_s(pid: u32) -> f64 {
    let mut ticks = 0u64;
    let dir = format!("/proc/{pid}/task");
    for t in std::fs::read_dir(&dir).expect("server's threads").flatten() {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.starts_with("cfdp-worker-") {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3; utime
        // and stime are fields 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks as f64 / 100.0
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
        let line = c.line("apply", &inserts(next..next + n));
        c.send_line(&line);
        c.recv_applied().check("fill batch");
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
    fn record(&mut self, rtt: Duration, a: &Applied, client: &[(&'static str, f64)]) {
        let server = a.timing.iter().map(|(k, v)| (k.as_str(), *v));
        for (k, v) in client.iter().copied().chain(server) {
            match self.stages.iter_mut().find(|(n, _)| n == k) {
                Some((_, s)) => s.push(v),
                None => self.stages.push((k.to_string(), vec![v])),
            }
        }
        self.rtt_ms.push(rtt.as_secs_f64() * 1e3);
        self.server_ms.push(a.wall_us as f64 / 1e3);
    }
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--label", "--cfdp"]);
    let quick = is_quick();
    let label = arg("--label").unwrap_or_else(|| "this".into());
    let cfdp = cfdp_binary();
    let trials = if quick { 20 } else { 100 };
    println!("machine: {}", machine_description());
    println!("cfdp: {} ({label})", cfdp.display());

    // 1. Latency at 97 %.
    let srv = Server::start(&cfdp, "lat", 100_000);
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
        r.check("insert batch");
        let line = c.line("apply", &deletes(next..next + 1024));
        let (rtt, r, client) = c.timed(&line);
        del.record(rtt, &r, &client);
        r.check("delete batch");
        next += 1024;
    }
    let mut one = Series::default();
    for _ in 0..trials * 2 {
        let line = c.line("apply", &inserts(next..next + 1));
        let (rtt, r, client) = c.timed(&line);
        one.record(rtt, &r, &client);
        r.check("single insert");
        let line = c.line("apply", &deletes(next..next + 1));
        let (rtt, r, client) = c.timed(&line);
        one.record(rtt, &r, &client);
        r.check("single delete");
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
    let srv = Server::start(&cfdp, "sus", 0);
    let mut c = Conn::open(&srv.socket);
    let window = Duration::from_secs_f64(if quick { 0.5 } else { 2.0 });
    let pkts = |c: &mut Conn| {
        c.call("stats", &json!({}))["totals"]["packets"]
            .as_u64()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let pid = srv.child.id();
    assert!(
        worker_cpu_s(pid) > 0.0,
        "no cfdp-worker thread found in /proc/{pid}/task"
    );
    // Packets per second of wall time and per CPU-second of the worker.
    let rate = |c: &mut Conn| {
        let (p0, cpu0, t0) = (pkts(c), worker_cpu_s(pid), Instant::now());
        std::thread::sleep(window);
        let p = (pkts(c) - p0) as f64;
        (
            p / t0.elapsed().as_secs_f64(),
            p / (worker_cpu_s(pid) - cpu0).max(0.01),
        )
    };
    let quiet_before = rate(&mut c);
    let batches: u64 = if quick { 40 } else { 2000 };
    let in_flight = 8;
    // The request lines are built before the clock starts, as a
    // controller's would be: building 1024 rules' JSON inside the timed
    // loop cost the client as much CPU as the worker used, on the same two
    // cores as the server.
    let mut next = 1u64 << 30;
    let mut pending_deletes: std::collections::VecDeque<u64> = Default::default();
    let lines: Vec<String> = (0..batches)
        .map(|i| {
            let b = if i % 2 == 0 {
                pending_deletes.push_back(next);
                next += 1024;
                inserts(next - 1024..next)
            } else {
                let s = pending_deletes.pop_front().expect("inserted first");
                deletes(s..s + 1024)
            };
            c.line("apply", &b)
        })
        .collect();
    let mut sent = 0usize;
    let mut done = 0usize;
    let (p0, cpu0) = (pkts(&mut c), worker_cpu_s(pid));
    let t0 = Instant::now();
    while done < lines.len() {
        while sent < lines.len() && sent - done < in_flight {
            c.send_line(&lines[sent]);
            sent += 1;
        }
        c.recv_applied().check("sustained batch");
        done += 1;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (p1, cpu1) = (pkts(&mut c), worker_cpu_s(pid));
    let updates_per_s = (batches * 1024) as f64 / elapsed;
    let churn_pps = (p1 - p0) as f64 / elapsed;
    let churn_per_cpu = (p1 - p0) as f64 / (cpu1 - cpu0).max(0.01);
    let quiet_after = rate(&mut c);
    let quiet = (quiet_before.0 + quiet_after.0) / 2.0;
    let quiet_per_cpu = (quiet_before.1 + quiet_after.1) / 2.0;
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
         {updates_per_s:.0} updates/s; worker {:.2} Mpps during churn vs {:.2} quiet ({:+.1} %); \
         per worker CPU-second {:.2} vs {:.2} M ({:+.1} %)",
        churn_pps / 1e6,
        quiet / 1e6,
        (churn_pps / quiet - 1.0) * 100.0,
        churn_per_cpu / 1e6,
        quiet_per_cpu / 1e6,
        (churn_per_cpu / quiet_per_cpu - 1.0) * 100.0
    );
    for (metric, x) in [
        ("updates_per_s", updates_per_s),
        ("worker_mpps_churn", churn_pps / 1e6),
        ("worker_mpps_quiet", quiet / 1e6),
        ("worker_mp_per_cpu_s_churn", churn_per_cpu / 1e6),
        ("worker_mp_per_cpu_s_quiet", quiet_per_cpu / 1e6),
    ] {
        rows.push(format!("{label},sustained,{metric},{x:.3}"));
    }
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
    let mut keep = cfdp_bench::rows_of_other_labels(&path, &label);
    keep.extend(rows);
    write_csv(&path, &header, &keep).expect("write csv");
    println!("wrote {}", path.display());
}
