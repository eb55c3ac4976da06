//! The control path's P4Runtime rows: a 1024-entry P4Runtime `Write`
//! round trip beside the same 1024 rules as one batch over the control
//! socket, against one real `cfdp run` (the binary beside this one: `cargo
//! build --release -p cfdp -p cfdp-bench`) looping a capture with one
//! worker and keeping its rule set in a `state_dir` (journal with fsync).
//!
//! The rules are multi-field (source /24, destination /24, UDP, a
//! destination-port range, a priority): what a P4Runtime `acl` entry is.
//! Each trial inserts them and deletes them again, through the socket
//! (JSON, `rollback_on_error`) and through P4Runtime (protobuf over gRPC,
//! `ROLLBACK_ON_ERROR`), the two doors alternating which goes first. Both
//! requests are built before the clock starts, as a controller has them
//! ready; the socket's answer is read as a line (its JSON is not parsed
//! inside the clock), the gRPC answer as tonic returns it. Reported:
//! round trip p50 / p99 per door and operation, and their ratio.
//!
//! Output: a table, `bench/results/control_p4runtime.csv` (quick:
//! `bench/results/quick/`). Run: `cargo run --release -p cfdp-bench --bin
//! control-p4runtime [-- --quick]`.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use cfdp_bench::{
    cfdp_binary, is_quick, machine_description, results_path, spawn_cfdp_run, write_csv,
};
use cfdp_p4runtime::pipeline;
use cfdp_p4runtime::proto::p4::v1 as p4;
use p4::p4_runtime_client::P4RuntimeClient;

const BATCH: u32 = 1024;
const DEVICE: u64 = 1;

/// Rule `i`: 10.x.y.0/24 → 192.0.2.0/24, UDP, destination ports 1000 to
/// 1000 + i % 100, priority 100 + i.
fn rule(i: u32) -> ([u8; 4], u16, u16, i32) {
    let src = [10, (i >> 8) as u8, i as u8, 0];
    (src, 1000, 1000 + (i % 100) as u16, 100 + i as i32)
}

fn socket_line(id: u64, method: &str, params: &str) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}\n")
}

fn socket_inserts() -> String {
    let rules: Vec<String> = (0..BATCH)
        .map(|i| {
            let (s, lo, hi, prio) = rule(i);
            format!(
                "{{\"op\":\"insert\",\"rule\":{{\"id\":{},\"priority\":{prio},\"match\":{{\
                 \"src_prefix\":\"{}.{}.{}.0/24\",\"dst_prefix\":\"192.0.2.0/24\",\"proto\":\"udp\",\
                 \"dport\":\"{lo}-{hi}\"}},\"action\":\"drop\"}}}}",
                i + 1,
                s[0],
                s[1],
                s[2]
            )
        })
        .collect();
    format!(
        "{{\"atomicity\":\"rollback_on_error\",\"updates\":[{}]}}",
        rules.join(",")
    )
}

fn socket_deletes() -> String {
    let ids: Vec<String> = (1..=BATCH)
        .map(|i| format!("{{\"op\":\"delete\",\"id\":{i}}}"))
        .collect();
    format!(
        "{{\"atomicity\":\"rollback_on_error\",\"updates\":[{}]}}",
        ids.join(",")
    )
}

fn entry(i: u32) -> p4::TableEntry {
    use p4::field_match::{FieldMatchType as F, Range, Ternary};
    let (s, lo, hi, priority) = rule(i);
    let ternary = |id, value: Vec<u8>, mask: Vec<u8>| p4::FieldMatch {
        field_id: id,
        field_match_type: Some(F::Ternary(Ternary {
            value: value.into(),
            mask: mask.into(),
        })),
    };
    p4::TableEntry {
        table_id: pipeline::ACL,
        r#match: vec![
            ternary(pipeline::SRC, s.to_vec(), vec![255, 255, 255, 0]),
            ternary(pipeline::DST, vec![192, 0, 2, 0], vec![255, 255, 255, 0]),
            ternary(pipeline::PROTO, vec![17], vec![255]),
            p4::FieldMatch {
                field_id: pipeline::DPORT,
                field_match_type: Some(F::Range(Range {
                    low: lo.to_be_bytes().to_vec().into(),
                    high: hi.to_be_bytes().to_vec().into(),
                })),
            },
        ],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: pipeline::DROP,
                params: vec![],
            })),
        }),
        priority,
        ..Default::default()
    }
}

fn write_request(t: p4::update::Type) -> p4::WriteRequest {
    p4::WriteRequest {
        device_id: DEVICE,
        election_id: Some(p4::Uint128 { high: 0, low: 1 }),
        atomicity: p4::write_request::Atomicity::RollbackOnError as i32,
        updates: (0..BATCH)
            .map(|i| p4::Update {
                r#type: t as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(entry(i))),
                }),
            })
            .collect(),
        ..Default::default()
    }
}

struct Socket {
    w: UnixStream,
    r: BufReader<UnixStream>,
    text: String,
    next: u64,
}

impl Socket {
    /// Sends a prepared line; the answer's round trip in µs.
    fn round_trip(&mut self, line: &str) -> f64 {
        self.text.clear();
        let t = Instant::now();
        self.w.write_all(line.as_bytes()).expect("send");
        self.r.read_line(&mut self.text).expect("read");
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert!(
            self.text.contains("\"applied\":true") && !self.text.contains("\"error\""),
            "socket batch failed: {}",
            &self.text[..self.text.len().min(300)]
        );
        us
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// `cfdp run` with its socket, journal and P4Runtime on a port it picks
/// and reports.
fn start_node(dir: &Path) -> (std::process::Child, Socket, u16) {
    let socket = dir.join("ctl.sock");
    let cfg = dir.join("cfdp.toml");
    cfdp_bench::write_node_config(&cfg, 100_000, &socket, &dir.join("state"), |c| {
        c.p4runtime.listen = "127.0.0.1:0".into();
        c.p4runtime.insecure_plaintext = true;
    });
    let mut child = spawn_cfdp_run(&cfdp_binary(), &cfg);
    let start = Instant::now();
    // `cfdp run` binds P4Runtime before its control socket answers.
    let s = loop {
        if let Ok(s) = UnixStream::connect(&socket) {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cfdp run did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let port = cfdp_bench::reported_port(&cfg, "cfdp: P4Runtime on ", &mut child);
    let sock = Socket {
        r: BufReader::new(s.try_clone().unwrap()),
        w: s,
        text: String::with_capacity(1 << 20),
        next: 0,
    };
    (child, sock, port)
}

type Grpc = P4RuntimeClient<tonic::transport::Channel>;

/// Connects and becomes primary; the stream (kept open by the returned
/// sender) must outlive the writes.
async fn primary(port: u16) -> (Grpc, tokio::sync::mpsc::Sender<p4::StreamMessageRequest>) {
    let mut grpc = P4RuntimeClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("P4Runtime");
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: DEVICE,
                election_id: Some(p4::Uint128 { high: 0, low: 1 }),
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let mut stream = grpc
        .stream_channel(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let _ = stream.message().await.unwrap();
    (grpc, tx)
}

/// Prints the table and writes the CSV.
fn report(us: &mut [[Vec<f64>; 2]; 2], trials: usize) {
    let machine = machine_description();
    println!("control path, {BATCH} multi-field rules per batch, {trials} trials ({machine})");
    println!("{:<10} {:<7} {:>9} {:>9}", "door", "op", "p50_ms", "p99_ms");
    let mut rows = Vec::new();
    for (door, name) in [(0, "socket"), (1, "p4runtime")] {
        for (op, opname) in [(0, "insert"), (1, "delete")] {
            let v = &mut us[door][op];
            let (p50, p99) = (percentile(v, 0.5) / 1e3, percentile(v, 0.99) / 1e3);
            println!("{name:<10} {opname:<7} {p50:>9.3} {p99:>9.3}");
            rows.push(format!(
                "{name},{opname},{BATCH},{trials},{p50:.3},{p99:.3}"
            ));
        }
    }
    let path = results_path("control_p4runtime.csv");
    write_csv(&path, "door,op,batch,trials,p50_ms,p99_ms", &rows).expect("write CSV");
    println!("wrote {}", path.display());
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    cfdp_bench::expect_flags(&["--cfdp"]);
    let trials = if is_quick() { 5 } else { 40 };
    let dir = tempfile::Builder::new()
        .prefix("cfdp-bench-p4-")
        .tempdir()
        .expect("a scratch directory");
    let (mut child, mut sock, port) = start_node(dir.path());
    let (mut grpc, stream) = primary(port).await;
    let (ins_text, del_text) = (socket_inserts(), socket_deletes());
    let (ins_req, del_req) = (
        write_request(p4::update::Type::Insert),
        write_request(p4::update::Type::Delete),
    );
    // [door][op]: socket, p4runtime × insert, delete.
    let mut us: [[Vec<f64>; 2]; 2] = Default::default();
    for trial in 0..trials + 2 {
        for door in [trial % 2, 1 - trial % 2] {
            let (a, b) = if door == 0 {
                sock.next += 2;
                let ins = socket_line(sock.next, "apply", &ins_text);
                let del = socket_line(sock.next + 1, "apply", &del_text);
                (sock.round_trip(&ins), sock.round_trip(&del))
            } else {
                let (ins, del) = (ins_req.clone(), del_req.clone());
                let t = Instant::now();
                grpc.write(ins).await.expect("P4Runtime insert");
                let a = t.elapsed().as_secs_f64() * 1e6;
                let t = Instant::now();
                grpc.write(del).await.expect("P4Runtime delete");
                (a, t.elapsed().as_secs_f64() * 1e6)
            };
            // The first two trials warm both doors up.
            if trial >= 2 {
                us[door][0].push(a);
                us[door][1].push(b);
            }
        }
    }
    drop(stream);
    let _ = child.kill();
    let _ = child.wait();
    report(&mut us, trials);
}
