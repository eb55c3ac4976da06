//! Floods against every door of one real `cfdp run` (issue 43's goals):
//! while a flood runs, the node's peak resident memory may rise by at most
//! 64 MiB, a one-rule batch over the Unix socket must still apply within
//! 1 s, and forwarding must go on. And a P4Runtime Read of 100k rules may
//! cost at most 2× per rule what a Read of 10k costs.
//!
//! The node (the `cfdp` binary beside this one: `cargo build --release -p
//! cfdp -p cfdp-bench`) loops `pcap/mixed.pcap` at 100 kpps on one worker,
//! keeps its rules in a `state_dir` (journal with fsync) and opens every
//! door: the Unix socket, the TCP door (token), metrics, and P4Runtime in
//! plaintext on loopback (`insecure_plaintext`, the door with the least in
//! front of it: a flooder reaches gRPC without a TLS handshake). It holds
//! 10,000 multi-field rules, so that a Read has something to amplify.
//!
//! Floods, one at a time and then all at once, each for a fixed time:
//! - `tcp-idle`: connections to the TCP door held open, half of them idle,
//!   half sending a long first line that never ends, reopened when closed;
//! - `metrics-idle`: connections to the metrics endpoint held open without
//!   a byte, reopened when closed;
//! - `p4-streams`: P4Runtime StreamChannels sending arbitration updates
//!   (each one answered) and never reading, reconnected when dropped;
//! - `p4-read`: Reads of 1,000 entities (every table's wildcard and entries
//!   by priority: the most distinct entities a Read may hold, repeated)
//!   whose answers are read one message a second;
//! - `all`: the four together.
//!
//! Measured for each: the peak of the node's resident memory while it ran
//! (`VmHWM`, reset through `/proc/PID/clear_refs` before it) over the
//! resident memory before it; a probe that connects to the Unix socket and
//! applies one insert and one delete every 100 ms (median and maximum round
//! trip, failures); the packets the worker received during the flood per
//! second (it is paced at 100 kpps); connections the flooders held at the
//! end and how many the node closed or refused.
//!
//! Output: tables, `bench/results/floods.csv` and
//! `bench/results/p4runtime_read.csv` (quick: `bench/results/quick/`).
//! Run: `cargo run --release -p cfdp-bench --bin floods [-- --quick]`.
#![forbid(unsafe_code)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_bench::{cfdp_binary, is_quick, machine_description, results_path, write_csv};
use cfdp_control::client::{Client, Target};
use cfdp_p4runtime::pipeline;
use cfdp_p4runtime::proto::p4::v1 as p4;
use p4::p4_runtime_client::P4RuntimeClient;
use serde_json::{json, Value};

const DEVICE: u64 = 1;
const PPS: u64 = 100_000;
const RULES: u32 = 10_000;
/// Connections each socket flooder tries to hold.
const HOLD: usize = 1000;
/// StreamChannels and Reads the P4Runtime flooders keep going.
const STREAMS: usize = 200;
const READERS: usize = 32;

struct Node {
    child: std::process::Child,
    pid: u32,
    socket: PathBuf,
    tcp: u16,
    metrics: u16,
    p4: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cfdp run` with its control socket, TCP control, metrics and
/// P4Runtime, each on a port the node picks and reports.
fn start_node(dir: &Path) -> Node {
    let socket = dir.join("ctl.sock");
    let cfg = dir.join("cfdp.toml");
    cfdp_bench::write_node_config(&cfg, PPS, &socket, &dir.join("state"), |c| {
        c.control.tcp = "127.0.0.1:0".into();
        c.control.token_file = dir.join("token").display().to_string();
        c.control.metrics = "127.0.0.1:0".into();
        c.p4runtime.listen = "127.0.0.1:0".into();
        c.p4runtime.insecure_plaintext = true;
    });
    let mut child = cfdp_bench::spawn_cfdp_run(&cfdp_binary(), &cfg);
    let pid = child.id();
    let start = Instant::now();
    while Client::connect(&Target::Unix(&socket)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cfdp run did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut port = |prefix| cfdp_bench::reported_port(&cfg, prefix, &mut child);
    let (tcp, metrics, p4) = (
        port("cfdp: control over TCP on "),
        port("cfdp: metrics on "),
        port("cfdp: P4Runtime on "),
    );
    Node {
        child,
        pid,
        socket,
        tcp,
        metrics,
        p4,
    }
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("node status");
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing"))
}

fn call(socket: &Path, method: &str, params: Value) -> Result<Value, String> {
    let mut c = Client::connect(&Target::Unix(socket)).map_err(|e| e.to_string())?;
    let r = c.call(method, params).map_err(|e| e.to_string())?;
    if r.get("error").is_some() {
        return Err(r.to_string());
    }
    Ok(r["result"].clone())
}

fn packets(socket: &Path) -> u64 {
    call(socket, "stats", json!({})).expect("stats")["totals"]["packets"]
        .as_u64()
        .expect("packets")
}

/// Rule `i`: 10.x.y.z/32 → 192.0.2.0/24, UDP, destination ports 1000 to
/// 1000 + i % 100, priority 100 + i.
fn rule_json(i: u32) -> Value {
    json!({"id": i + 1, "priority": 100 + i, "action": "drop", "match": {
        "src_prefix": format!("10.{}.{}.{}/32", (i >> 16) as u8, (i >> 8) as u8, i as u8),
        "dst_prefix": "192.0.2.0/24", "proto": "udp",
        "dport": format!("1000-{}", 1000 + i % 100)}})
}

fn install(socket: &Path, from: u32, to: u32) {
    for lo in (from..to).step_by(10_000) {
        let updates: Vec<Value> = (lo..to.min(lo + 10_000))
            .map(|i| json!({"op": "insert", "rule": rule_json(i)}))
            .collect();
        let r = call(socket, "apply", json!({"updates": updates})).expect("install");
        assert_eq!(r["applied"], true, "install failed");
    }
}

#[derive(Default)]
struct Counts {
    /// Connections the node closed or refused.
    closed: AtomicU64,
    /// Connections held when the flood stopped.
    held: AtomicU64,
}

/// Holds up to [`HOLD`] connections to `port`, replacing those the node
/// closes; `first` is what a connection sends after connecting.
fn hold_sockets(port: u16, stop: &AtomicBool, counts: &Counts, first: impl Fn(usize) -> Vec<u8>) {
    let mut held: Vec<TcpStream> = Vec::new();
    let mut opened = 0usize; // numbers `first`'s calls
    while !stop.load(Relaxed) {
        let before = held.len();
        held.retain_mut(|s| {
            let mut b = [0u8; 512];
            match s.read(&mut b) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
                Err(_) => false,
            }
        });
        counts
            .closed
            .fetch_add((before - held.len()) as u64, Relaxed);
        while held.len() < HOLD && !stop.load(Relaxed) {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                counts.closed.fetch_add(1, Relaxed);
                break;
            };
            opened += 1;
            let _ = s.write_all(&first(opened));
            s.set_nonblocking(true).unwrap();
            held.push(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    counts.held.fetch_add(held.len() as u64, Relaxed);
}

fn arbitration(election: u64) -> p4::StreamMessageRequest {
    p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: DEVICE,
                election_id: Some(p4::Uint128 {
                    high: 0,
                    low: election,
                }),
                ..Default::default()
            },
        )),
    }
}

/// A stream that sends arbitration updates as fast as they are taken and
/// never reads an answer; reconnects when the node drops it.
async fn stream_flooder(port: u16, stop: Arc<AtomicBool>, counts: Arc<Counts>, seed: u64) {
    let mut election = seed << 32;
    let mut held = false;
    while !stop.load(Relaxed) {
        let Ok(mut c) = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}")).await else {
            counts.closed.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let Ok(answers) = c
            .stream_channel(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
        else {
            counts.closed.fetch_add(1, Relaxed);
            continue;
        };
        held = true;
        while !stop.load(Relaxed) {
            election += 1;
            let send = tx.send(arbitration(election));
            match tokio::time::timeout(Duration::from_millis(200), send).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                // Blocked by flow control: the node stopped reading us.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        drop(answers);
        if !stop.load(Relaxed) {
            held = false;
            counts.closed.fetch_add(1, Relaxed);
        }
    }
    if held {
        counts.held.fetch_add(1, Relaxed);
    }
}

fn amplifying_read() -> p4::ReadRequest {
    let wildcard = |table_id, priority| p4::Entity {
        entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id,
            priority,
            ..Default::default()
        })),
    };
    // The most distinct entities a Read may hold: both wildcards (every
    // table, the ACL table) and entries by priority, repeated to 1,000.
    let distinct = cfdp_p4runtime::service::MAX_READ_ENTITIES;
    p4::ReadRequest {
        device_id: DEVICE,
        entities: (0..1000)
            .map(|i| match i % distinct {
                0 => wildcard(0, 0),
                1 => wildcard(pipeline::ACL, 0),
                k => wildcard(pipeline::ACL, 100 + k as i32),
            })
            .collect(),
        ..Default::default()
    }
}

/// Sends amplifying Reads and reads their answers one message a second.
async fn read_flooder(port: u16, stop: Arc<AtomicBool>, counts: Arc<Counts>) {
    let req = amplifying_read();
    let mut held = false;
    while !stop.load(Relaxed) {
        let Ok(mut c) = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}")).await else {
            counts.closed.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.load(Relaxed) {
            let Ok(answers) = c.read(req.clone()).await else {
                break;
            };
            held = true;
            let mut answers = answers.into_inner();
            loop {
                if stop.load(Relaxed) {
                    break;
                }
                match answers.message().await {
                    Ok(Some(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
                    _ => break,
                }
            }
        }
        if !stop.load(Relaxed) {
            held = false;
            counts.closed.fetch_add(1, Relaxed);
        }
    }
    if held {
        counts.held.fetch_add(1, Relaxed);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Flood {
    TcpIdle,
    MetricsIdle,
    P4Streams,
    P4Read,
}

/// Starts `floods` against `node`; they run until `stop`.
fn start_floods(
    node: &Node,
    floods: &[Flood],
    stop: &Arc<AtomicBool>,
    counts: &Arc<Counts>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for &f in floods {
        let (stop, counts) = (stop.clone(), counts.clone());
        let (tcp, metrics, p4) = (node.tcp, node.metrics, node.p4);
        threads.push(std::thread::spawn(move || match f {
            Flood::TcpIdle => hold_sockets(tcp, &stop, &counts, |i| {
                if i % 2 == 0 {
                    Vec::new()
                } else {
                    // An apply with no hello, long, and no newline.
                    let mut b =
                        br#"{"jsonrpc":"2.0","id":1,"method":"apply","params":{"updates":["#
                            .to_vec();
                    b.resize(64 * 1024, b' ');
                    b
                }
            }),
            Flood::MetricsIdle => hold_sockets(metrics, &stop, &counts, |_| Vec::new()),
            Flood::P4Streams | Flood::P4Read => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let mut tasks = Vec::new();
                    let n = if f == Flood::P4Streams {
                        STREAMS
                    } else {
                        READERS
                    };
                    for i in 0..n {
                        let (stop, counts) = (stop.clone(), counts.clone());
                        tasks.push(tokio::spawn(async move {
                            if f == Flood::P4Streams {
                                stream_flooder(p4, stop, counts, i as u64 + 1).await;
                            } else {
                                read_flooder(p4, stop, counts).await;
                            }
                        }));
                    }
                    for t in tasks {
                        let _ = t.await;
                    }
                });
            }
        }));
    }
    threads
}

/// What one flood did to the node.
struct Outcome {
    name: String,
    rss_before_mib: f64,
    peak_rise_mib: f64,
    probes: usize,
    probe_failures: usize,
    probe_p50_ms: f64,
    probe_max_ms: f64,
    received_pps: f64,
    held: u64,
    closed: u64,
}

fn run_flood(node: &Node, floods: &[Flood], name: &str, secs: f64) -> Outcome {
    let rss_before = status_kib(node.pid, "VmRSS:");
    std::fs::write(format!("/proc/{}/clear_refs", node.pid), "5").expect("reset VmHWM");
    let (p0, t0) = (packets(&node.socket), Instant::now());
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let threads = start_floods(node, floods, &stop, &counts);
    let mut ms = Vec::new();
    let mut failures = 0;
    let mut id = 2_000_000u32;
    while t0.elapsed().as_secs_f64() < secs {
        std::thread::sleep(Duration::from_millis(100));
        id += 1;
        let t = Instant::now();
        let ok = call(
            &node.socket,
            "apply",
            json!({"updates": [{"op": "insert", "rule": rule_json(id)}, {"op": "delete", "id": id + 1}]}),
        )
        .is_ok_and(|r| r["applied"] == true);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        failures += usize::from(!ok);
    }
    let (p1, elapsed) = (packets(&node.socket), t0.elapsed().as_secs_f64());
    let peak = status_kib(node.pid, "VmHWM:");
    stop.store(true, Relaxed);
    for t in threads {
        t.join().expect("flooder");
    }
    let received_pps = (p1 - p0) as f64 / elapsed;
    let probes = ms.len();
    let probe_max_ms = ms.iter().copied().fold(0.0, f64::max);
    let probe_p50_ms = cfdp_bench::median(&mut ms);
    // Let the node close what the flooders left before the next one.
    std::thread::sleep(Duration::from_secs(2));
    Outcome {
        name: name.to_owned(),
        rss_before_mib: rss_before as f64 / 1024.0,
        peak_rise_mib: peak.saturating_sub(rss_before) as f64 / 1024.0,
        probes,
        probe_failures: failures,
        probe_p50_ms,
        probe_max_ms,
        received_pps,
        held: counts.held.load(Relaxed),
        closed: counts.closed.load(Relaxed),
    }
}

/// The full wildcard Read's time (median of `trials`) and entries.
async fn timed_read(port: u16, trials: usize) -> (f64, usize) {
    let mut c = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("P4Runtime");
    let req = p4::ReadRequest {
        device_id: DEVICE,
        entities: vec![p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry::default())),
        }],
        ..Default::default()
    };
    let mut secs = Vec::new();
    let mut entries = 0;
    for _ in 0..trials + 1 {
        let t = Instant::now();
        let mut s = c.read(req.clone()).await.expect("read").into_inner();
        entries = 0;
        while let Some(r) = s.message().await.expect("read answer") {
            entries += r.entities.len();
        }
        secs.push(t.elapsed().as_secs_f64());
    }
    secs.remove(0); // warm-up
    (cfdp_bench::median(&mut secs), entries)
}

fn main() {
    cfdp_bench::expect_flags(&["--cfdp"]);
    let quick = is_quick();
    let dir = tempfile::Builder::new()
        .prefix("cfdp-bench-floods")
        .tempdir()
        .unwrap();
    let node = start_node(dir.path());
    install(&node.socket, 0, RULES);
    flood_table(&node, if quick { 3.0 } else { 10.0 });
    read_table(&node, if quick { 3 } else { 7 });
}

/// Each flood, then all at once: the table and `floods.csv`.
fn flood_table(node: &Node, secs: f64) {
    use Flood::{MetricsIdle, P4Read, P4Streams, TcpIdle};
    let plan: &[(&str, &[Flood])] = &[
        ("none", &[]),
        ("tcp-idle", &[TcpIdle]),
        ("metrics-idle", &[MetricsIdle]),
        ("p4-streams", &[P4Streams]),
        ("p4-read", &[P4Read]),
        ("all", &[TcpIdle, MetricsIdle, P4Streams, P4Read]),
    ];
    let machine = machine_description();
    println!("floods, {secs} s each, {RULES} rules, paced at {PPS} pps ({machine})");
    let header = "flood,seconds,rules,rss_before_mib,peak_rise_mib,probes,probe_failures,\
                  probe_p50_ms,probe_max_ms,received_pps,held,closed";
    println!("{}", header.replace(',', " "));
    let mut rows = Vec::new();
    for (name, floods) in plan {
        let o = run_flood(node, floods, name, secs);
        let row = format!(
            "{},{secs},{RULES},{:.1},{:.1},{},{},{:.3},{:.3},{:.0},{},{}",
            o.name,
            o.rss_before_mib,
            o.peak_rise_mib,
            o.probes,
            o.probe_failures,
            o.probe_p50_ms,
            o.probe_max_ms,
            o.received_pps,
            o.held,
            o.closed
        );
        println!("{}", row.replace(',', " "));
        rows.push(row);
    }
    let path = results_path("floods.csv");
    write_csv(&path, header, &rows).expect("write CSV");
    println!("wrote {}", path.display());
}

/// A Read of every entry at 10k and 100k rules: `p4runtime_read.csv`.
fn read_table(node: &Node, trials: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    println!("P4Runtime Read of every entry, median of {trials}");
    println!("{:>8} {:>9} {:>12}", "rules", "read_s", "us_per_rule");
    let mut per_rule = Vec::new();
    for (n, from) in [(RULES, RULES), (10 * RULES, RULES)] {
        install(&node.socket, from, n);
        let (s, entries) = rt.block_on(timed_read(node.p4, trials));
        assert_eq!(entries, n as usize, "the Read answered every rule");
        let us = s * 1e6 / f64::from(n);
        per_rule.push(us);
        println!("{n:>8} {s:>9.3} {us:>12.3}");
        rows.push(format!("{n},{trials},{s:.4},{us:.4}"));
    }
    println!(
        "per-rule ratio 100k/10k: {:.2} (goal <= 2)",
        per_rule[1] / per_rule[0]
    );
    let path = results_path("p4runtime_read.csv");
    write_csv(&path, "rules,trials,read_s,us_per_rule", &rows).expect("write CSV");
    println!("wrote {}", path.display());
}
