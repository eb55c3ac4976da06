//! End to end: a real `cfdp run` replaying a capture in a loop, driven
//! through its real Unix control socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_config::{Overload, RunConfig};
use cfdp_control::client::{Client, Target};
use cfdp_testkit::captures as gen;
use pcap_file::pcap::PcapReader;
use serde_json::{json, Value};

use cfdp_testkit::dirs::test_dir as tmpdir;

struct Server {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Server {
    /// Starts `cfdp run` over the pair capture (64 pairs) in a loop at
    /// `pps`, its configuration built from the structs and then given to
    /// `edit`.
    fn start(dir: &Path, pps: u64, edit: impl FnOnce(&mut RunConfig)) -> Server {
        Self::start_with(dir, pps, edit, true, &[])
    }

    /// As `start`; `output`: write the forwarded packets; `run_args`: more
    /// arguments for `cfdp run`.
    fn start_with(
        dir: &Path,
        pps: u64,
        edit: impl FnOnce(&mut RunConfig),
        output: bool,
        run_args: &[&str],
    ) -> Server {
        let cap = dir.join("pairs.pcap");
        if !cap.exists() {
            gen::write_pcap(&cap, &gen::pairs(64)).unwrap();
        }
        let socket = dir.join("ctl.sock");
        let cfg = dir.join("cfdp.toml");
        let mut c = cfdp_testkit::node::looping(&cap, pps, &socket, &dir.join("state"));
        c.dataplane.workers = 1;
        if output {
            c.pcap.output = dir.join("out.pcap").display().to_string();
        }
        edit(&mut c);
        cfdp_testkit::node::write(&cfg, &c);
        let child = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(run_args)
            .stdout(Stdio::from(
                std::fs::File::create(dir.join("stdout")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let mut s = Server {
            child,
            dir: dir.to_path_buf(),
            socket,
        };
        cfdp_testkit::child::wait_for_socket(&s.socket, &s.dir.join("stderr"), &mut s.child);
        s
    }

    fn client(&self) -> Client {
        Client::connect(&Target::Unix(&self.socket)).unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// The port of the door `cfdp run` reports on the line starting with
    /// `prefix` (the door configured on port 0: see `cfdp_testkit::child`).
    fn port(&mut self, prefix: &str) -> u16 {
        cfdp_testkit::child::reported_addr(&self.dir.join("stderr"), prefix, &mut self.child).port()
    }

    /// SIGTERM, then waits; returns the final summary line.
    fn stop(mut self) -> Value {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let st = self.child.wait().unwrap();
        assert!(st.success(), "exit {st}: {}", self.stderr());
        let out = std::fs::read_to_string(self.dir.join("stdout")).unwrap();
        let last = out.lines().last().expect("a final line");
        let v: Value = serde_json::from_str(last).unwrap();
        assert_eq!(v["final"], true, "{last}");
        v
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flow_rule(id: u32, (src, dst): ([u8; 4], [u8; 4]), action: Value) -> Value {
    let ip = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_string();
    json!({"id": id, "match": {"flow": {"src": ip(src), "dst": ip(dst), "proto": "udp",
            "sport": 1000, "dport": 2000}}, "action": action})
}

fn apply(c: &mut Client, atomicity: &str, updates: Value) -> Value {
    let r = c
        .call("apply", json!({"atomicity": atomicity, "updates": updates}))
        .unwrap();
    assert!(r.get("error").is_none(), "{r}");
    r["result"].clone()
}

fn codes(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_string())
        .collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn batches_change_forwarding_roll_back_cleanly_and_survive_a_restart() {
    let dir = tmpdir("main");
    let srv = Server::start(&dir, 20_000, |_| {});
    let mut c = srv.client();
    let hello = c.call("hello", json!({})).unwrap();
    assert_eq!(hello["result"]["api_version"], 1);
    assert_eq!(hello["result"]["capabilities"]["durable"], true);

    // Nothing installed: nothing dropped.
    let s0 = c.call("stats", json!({})).unwrap()["result"].clone();
    assert_eq!(s0["totals"]["dropped"], 0);

    // Drop flow A, count flow B. Once acknowledged, packets obey them.
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([
            {"op": "insert", "rule": flow_rule(1, gen::PAIR_A, json!("drop"))},
            {"op": "insert", "rule": flow_rule(2, gen::PAIR_B, json!("count"))},
        ]),
    );
    assert_eq!(codes(&r), ["ok", "ok"]);
    assert_eq!(r["generation"], 1);
    let gen_after = r["generation"].clone();
    let get = |c: &mut Client, id: u32| c.call("get", json!({"id": id})).unwrap()["result"].clone();
    wait_for("rule 1 drops packets", || {
        get(&mut c, 1)["packets"].as_u64() > Some(100)
    });
    wait_for("rule 2 counts packets", || {
        get(&mut c, 2)["packets"].as_u64() > Some(100)
    });
    let s1 = c.call("stats", json!({})).unwrap()["result"].clone();
    assert!(s1["totals"]["dropped"].as_u64() > Some(0));
    assert_eq!(s1["rule_counters"][0]["id"], 2);

    // A batch with one bad update is rolled back whole.
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([
            {"op": "delete", "id": 1},
            {"op": "insert", "rule": flow_rule(2, ([1, 1, 1, 1], [2, 2, 2, 2]), json!("drop"))},
        ]),
    );
    assert_eq!(codes(&r), ["aborted", "already_exists"]);
    assert_eq!(r["generation"], gen_after);
    let rules = c.call("rules", json!({})).unwrap()["result"].clone();
    assert_eq!(rules["total"], 2);
    assert_eq!(rules["rules"][0]["action"], "drop");

    // Malformed requests get errors; the connection stays usable.
    for (line, code) in [
        ("{not json", -32700),
        ("[1, 2]", -32600),
        (r#"{"id": 9, "method": "reboot"}"#, -32601),
        (
            r#"{"id": 9, "method": "apply", "params": {"updates": 5}}"#,
            -32602,
        ),
        (
            r#"{"id": 9, "method": "get", "params": {"id": 4242}}"#,
            -32005,
        ),
    ] {
        let r = c.send_raw(line).unwrap();
        assert_eq!(r["error"]["code"], code, "{line} -> {r}");
    }
    assert_eq!(c.call("ping", json!({})).unwrap()["result"]["pong"], true);

    // A stale expected_generation is refused.
    let r = c
        .call(
            "apply",
            json!({"expected_generation": 0, "updates": [{"op": "delete", "id": 1}]}),
        )
        .unwrap();
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert_eq!(r["error"]["data"]["current_generation"], gen_after);

    // One more acknowledged change, then a restart restores all of them.
    let r = apply(
        &mut c,
        "continue_on_error",
        json!([{"op": "modify", "rule": flow_rule(2, gen::PAIR_B, json!({"redirect": 3}))}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    let before = c.call("rules", json!({})).unwrap()["result"].clone();
    drop(c);
    let fin = srv.stop();
    assert_eq!(fin["generation"], 2);
    let srv = Server::start(&dir, 20_000, |_| {});
    let mut c = srv.client();
    let after = c.call("rules", json!({})).unwrap()["result"].clone();
    assert_eq!(after["generation"], before["generation"]);
    let strip = |v: &Value| {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].clone(), r["match"].clone(), r["action"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&after), strip(&before));
    assert!(
        srv.stderr().contains("restored 2 rules at generation 2"),
        "{}",
        srv.stderr()
    );
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn dataplane_atomic_batches_never_split_a_pair_on_the_wire() {
    let dir = tmpdir("atomic");
    let srv = Server::start(&dir, 50_000, |_| {});
    let mut c = srv.client();
    let pair = |op: &str, port: u16| {
        json!([
            {"op": op, "rule": flow_rule(1, gen::PAIR_A, json!({"redirect": port}))},
            {"op": op, "rule": flow_rule(2, gen::PAIR_B, json!({"redirect": port}))},
        ])
    };
    assert_eq!(
        codes(&apply(&mut c, "dataplane_atomic", pair("insert", 1))),
        ["ok", "ok"]
    );
    for i in 0..60 {
        let r = apply(
            &mut c,
            "dataplane_atomic",
            pair("modify", 1 + (i % 2) as u16),
        );
        assert_eq!(codes(&r), ["ok", "ok"]);
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(c);
    srv.stop();
    // Each output must hold whole pairs, A_i immediately followed by B_i.
    let mut total = 0;
    for port in [1, 2] {
        let path = dir.join(format!("out.port{port}.pcap"));
        let mut r = PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut frames = Vec::new();
        while let Some(p) = r.next_packet() {
            frames.push(gen::pair_of(&p.unwrap().data).expect("a pair frame"));
        }
        assert!(frames.len() > 200, "port {port}: {} frames", frames.len());
        assert_eq!(frames.len() % 2, 0, "port {port}: a pair was split");
        for (i, w) in frames.chunks(2).enumerate() {
            assert!(
                w[0].1 && !w[1].1 && w[0].0 == w[1].0,
                "port {port}: frames {} and {} are {:?} and {:?}: a pair was split",
                2 * i,
                2 * i + 1,
                w[0],
                w[1]
            );
        }
        total += frames.len();
    }
    assert!(total > 1000);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_peer_whose_uid_is_not_allowed_is_refused() {
    let dir = tmpdir("peer");
    // Allow one uid that is not ours (tests may run as root or not).
    let me = rustix::process::getuid().as_raw();
    let other = if me == 4242 { 4243 } else { 4242 };
    let srv = Server::start(&dir, 1000, |c| c.control.allowed_uids = vec![other]);
    let mut s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"{\"id\": 1, \"method\": \"ping\"}\n");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let v: Value = serde_json::from_str(answer.trim()).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("uid {me}")),
        "{v}"
    );
    assert!(!answer.contains("pong"));
    // Another user is allowed, so the file lets everyone connect (uid 4242
    // could not, otherwise) and the peer check is the gate: it refused us.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&srv.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn limits_protect_the_server_from_bad_clients() {
    let dir = tmpdir("limits");
    let srv = Server::start(&dir, 1000, |c| {
        c.control.max_line_bytes = 2048;
        c.control.max_connections = 2;
        c.control.max_batch = 3;
    });
    let mut c = srv.client();
    // Over-long line: an error, then the connection still works.
    let long = format!(
        "{{\"id\": 1, \"method\": \"ping\", \"pad\": \"{}\"}}",
        "x".repeat(5000)
    );
    let r = c.send_raw(&long).unwrap();
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(c.call("ping", json!({})).unwrap()["result"]["pong"], true);
    // Too big a batch is refused whole.
    let ups: Vec<Value> = (0..4).map(|i| json!({"op": "delete", "id": i})).collect();
    let r = c.call("apply", json!({"updates": ups})).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // A third connection is turned away while two are open.
    let _c2 = srv.client();
    let mut s3 = UnixStream::connect(&srv.socket).unwrap();
    s3.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    let _ = s3.read_to_string(&mut answer);
    assert!(answer.contains("too many connections"), "{answer}");
    // A client that stalls mid-line does not block the others.
    let mut stall = UnixStream::connect(&srv.socket);
    drop(_c2);
    if let Ok(s) = &mut stall {
        let _ = s.write_all(b"{\"id\": 1, \"meth");
    }
    assert_eq!(c.call("ping", json!({})).unwrap()["result"]["pong"], true);
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// `get` reports each rule's last hit: about now for a rule the looping
/// capture matches, null for one it never matches.
#[test]
fn rules_report_their_last_hit() {
    let dir = tmpdir("last-hit");
    let srv = Server::start(&dir, 1000, |_| {});
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([
            {"op": "insert", "rule": flow_rule(1, gen::PAIR_A, json!("count"))},
            {"op": "insert", "rule": flow_rule(3, ([9, 9, 9, 9], [8, 8, 8, 8]), json!("drop"))},
        ]),
    );
    assert_eq!(codes(&r), ["ok", "ok"]);
    let get = |c: &mut Client, id: u32| c.call("get", json!({"id": id})).unwrap()["result"].clone();
    wait_for("rule 1 counts packets", || {
        get(&mut c, 1)["packets"].as_u64() > Some(0)
    });
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let hit = get(&mut c, 1)["last_hit_unix_s"]
        .as_u64()
        .expect("rule 1 was hit");
    assert!(hit + 5 >= unix_now() && hit <= unix_now(), "last hit {hit}");
    assert_eq!(get(&mut c, 3)["last_hit_unix_s"], Value::Null);
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// A client that trickles a request line a byte at a time (each read well
/// inside the idle timeout) is closed once the line is `request_timeout_s`
/// old; a well-behaved client is not.
#[test]
fn a_client_trickling_a_line_is_closed_after_the_request_timeout() {
    let dir = tmpdir("trickle");
    let srv = Server::start(&dir, 1000, |c| {
        c.control.idle_timeout_s = 60;
        c.control.request_timeout_s = 1;
    });
    let mut good = srv.client();
    let mut s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(150)))
        .unwrap();
    let line = b"{\"id\": 1, \"method\": \"ping\", \"params\": {}}";
    let mut closed = false;
    for &b in line.iter().cycle().take(100) {
        if s.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => panic!("an answer to a line that never ended"),
            Err(_) => {} // nothing yet: trickle on
        }
        assert_eq!(
            good.call("ping", json!({})).unwrap()["result"]["pong"],
            true
        );
    }
    // When it was closed is the server's clock, not the test's: only
    // that it was, while the well-behaved client kept being answered.
    assert!(closed, "the trickling client was never closed");
    assert_eq!(
        good.call("ping", json!({})).unwrap()["result"]["pong"],
        true
    );
    drop(good);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// `stats` and a metrics scrape are answered from the published board
/// while the control thread is busy with a batch, and report the generation
/// before it; a `ping`, which goes through the control thread, comes after
/// it. The batch is held in the control thread by the `hold_batches` test
/// hook until the test releases it: ordering, not timing.
#[test]
fn stats_answer_while_a_batch_is_applied() {
    let dir = tmpdir("stats-during-batch");
    let hold = dir.join("hold");
    std::fs::create_dir_all(&hold).unwrap();
    let mut srv = Server::start_with(
        &dir,
        1000,
        |c| c.control.metrics = "127.0.0.1:0".into(),
        true,
        &["--hold-batches", hold.to_str().unwrap()],
    );
    let metrics = srv.port(METRICS);
    let mut slow = srv.client();
    let mut quick = srv.client();
    let g0 = quick.call("stats", json!({})).unwrap()["result"]["generation"].clone();
    let batch = std::thread::spawn(move || {
        let updates = json!([{"op": "insert", "rule": flow_rule(5, gen::PAIR_A, json!("drop"))}]);
        apply(&mut slow, "rollback_on_error", updates)
    });
    wait_for("the batch is held in the control thread", || {
        hold.join("held").exists()
    });
    // Its own connection, with a read timeout: a stats that queued behind
    // the held batch would never come, and the test fails instead of
    // hanging.
    let board = UnixStream::connect(&srv.socket).unwrap();
    board
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut board_lines = std::io::BufReader::new(&board);
    for _ in 0..3 {
        (&board)
            .write_all(b"{\"id\":1,\"method\":\"stats\"}\n")
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut board_lines, &mut line).expect("stats answered");
        let st: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            st["result"]["generation"], g0,
            "stats during the batch: {st}"
        );
        let body = scrape(metrics);
        assert!(
            body.contains(&format!("\ncfdp_generation {}", g0.as_u64().unwrap())),
            "the scrape did not show the generation before the batch"
        );
    }
    std::fs::write(hold.join("release"), b"").unwrap();
    let pong = quick.call("ping", json!({})).unwrap();
    assert_ne!(
        pong["result"]["generation"], g0,
        "ping is answered by the control thread, after the batch"
    );
    let r = batch.join().unwrap();
    assert_eq!(codes(&r), ["ok"]);
    drop(quick);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ctl_prints_the_response_and_sets_the_exit_status() {
    let dir = tmpdir("ctl");
    let srv = Server::start(&dir, 1000, |_| {});
    let ctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .arg("ctl")
            .arg("--socket")
            .arg(&srv.socket)
            .args(args)
            .output()
            .unwrap()
    };
    let out = ctl(&["ping"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["pong"], true);
    let batch = dir.join("batch.json");
    std::fs::write(
        &batch,
        json!({"updates": [{"op": "insert", "rule": flow_rule(5, gen::PAIR_A, json!("drop"))}]})
            .to_string(),
    )
    .unwrap();
    assert!(ctl(&["apply", batch.to_str().unwrap()]).status.success());
    // The same insert again: the server answers, an update failed: exit 1.
    let out = ctl(&["apply", batch.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["results"][0]["code"], "already_exists");
    assert_eq!(ctl(&["get", "999"]).status.code(), Some(1));
    assert!(ctl(&["get", "5"]).status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_cfdp"))
        .args(["ctl", "--socket", "/nonexistent/cfdp.sock", "ping"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// One `GET /metrics` from the exporter on `port`: the whole HTTP answer.
/// One scrape of the metrics endpoint; a 10 s read timeout makes an
/// endpoint that never answers a failure, not a hang.
fn scrape(port: u16) -> String {
    scrape_as(port, &format!("127.0.0.1:{port}"))
}

/// A scrape with `Host: host`.
fn scrape_as(port: u16, host: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).expect("a scrape answered");
    body
}

/// The lines `cfdp run` prints for its TCP doors (see `Server::port`).
const TCP: &str = "cfdp: control over TCP on ";
const METRICS: &str = "cfdp: metrics on ";

#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn tcp_listener_and_prometheus_metrics() {
    let dir = tmpdir("tcp");
    let mut srv = Server::start(&dir, 5000, |c| {
        c.control.tcp = "127.0.0.1:0".into();
        c.control.metrics = "127.0.0.1:0".into();
        c.control.token_file = dir.join("cfdp.token").display().to_string();
    });
    let (tcp, metrics) = (srv.port(TCP), srv.port(METRICS));
    let addr = format!("127.0.0.1:{tcp}");
    let token = cfdp_control::auth::Token::read(&dir.join("cfdp.token")).unwrap();
    let mut c = Client::connect(&Target::Tcp {
        addr: &addr,
        token: token.as_str(),
    })
    .unwrap();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": flow_rule(7, gen::PAIR_B, json!("count"))}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    // A page that rebound its DNS name to this address (the browser sends
    // that name as Host) is refused; addresses and localhost are served.
    let rebound = scrape_as(metrics, &format!("attacker.example:{metrics}"));
    assert!(rebound.starts_with("HTTP/1.0 421"), "{rebound}");
    assert!(!rebound.contains("cfdp_"), "{rebound}");
    assert!(scrape_as(metrics, "localhost").starts_with("HTTP/1.0 200"));
    // Idle sockets hold no handler: with 40 open (4 handlers and a queue
    // of 16 used to be all it took to deny every scrape for 5 s), a
    // scrape is answered.
    let idle: Vec<std::net::TcpStream> = (0..40)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap())
        .collect();
    assert!(scrape_as(metrics, "localhost").starts_with("HTTP/1.0 200"));
    drop(idle);
    let scrape = || scrape(metrics);
    let positive = |body: &str, series: &str| {
        body.lines().any(|l| {
            l.starts_with(series)
                && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0)
        })
    };
    wait_for("rule 7 and bursts counted in the metrics", || {
        let body = scrape();
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
        positive(&body, "cfdp_rule_packets_total{rule=\"7\"}")
            && positive(&body, "cfdp_burst_duration_seconds_count{worker=\"0\"}")
    });
    let body = scrape();
    let value = |series: &str| -> Option<f64> {
        body.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    assert!(
        value("cfdp_packets_total{worker=\"0\"}") > Some(0.0),
        "{body}"
    );
    assert_eq!(value("cfdp_filter_items"), Some(1.0), "{body}");
    assert_eq!(value("cfdp_generation"), Some(1.0), "{body}");
    assert_eq!(
        value("cfdp_batches_total{outcome=\"applied\"}"),
        Some(1.0),
        "{body}"
    );
    // Latencies are histograms: the one batch is counted once, in a finite
    // bucket, and the +Inf bucket holds every observation.
    assert_eq!(
        value("cfdp_batch_duration_seconds_count"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value("cfdp_batch_duration_seconds_bucket{le=\"+Inf\"}"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value("cfdp_batch_duration_seconds_bucket{le=\"6.5536\"}"),
        Some(1.0),
        "{body}"
    );
    assert!(
        value("cfdp_batch_duration_seconds_sum") > Some(0.0),
        "{body}"
    );
    let bursts = value("cfdp_burst_duration_seconds_count{worker=\"0\"}");
    assert!(bursts > Some(0.0), "{body}");
    // Time by stage: the worker's first burst is a timed one.
    assert!(
        value("cfdp_stage_sampled_packets_total{worker=\"0\"}") > Some(0.0),
        "{body}"
    );
    for stage in ["rx", "decode", "track", "classify", "act", "tx"] {
        let series = format!("cfdp_stage_nanoseconds_total{{worker=\"0\",stage=\"{stage}\"}}");
        assert!(value(&series).is_some(), "{series}: {body}");
    }
    assert_eq!(
        value("cfdp_burst_duration_seconds_bucket{le=\"+Inf\",worker=\"0\"}"),
        bursts,
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    // A remote (non-loopback) TCP address is refused unless allowed.
    drop(c);
    srv.stop();
    let bad = dir.join("bad.toml");
    let mut cfg = RunConfig::default();
    cfg.rules.file = String::new();
    cfg.control.socket = String::new();
    cfg.control.tcp = "0.0.0.0:7".into();
    cfg.control.token_file = dir.join("bad.token").display().to_string();
    cfdp_testkit::node::write(&bad, &cfg);
    let out = Command::new(env!("CARGO_BIN_EXE_cfdp"))
        .args(["run", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tcp_allow_remote"), "{err}");
    assert!(
        !dir.join("bad.token").exists(),
        "a refused address made a token"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A `kill -9` while batches are in flight loses no acknowledged batch.
#[test]
fn kill_9_in_the_middle_of_batches_loses_no_acknowledged_batch() {
    let dir = tmpdir("kill9");
    let mut srv = Server::start(&dir, 20_000, |_| {});
    let socket = srv.socket.clone();
    // A client pushing one-insert batches as fast as it can; it records
    // every id whose batch was acknowledged.
    let (started, pushing) = std::sync::mpsc::channel();
    let pusher = std::thread::spawn(move || {
        let mut c = Client::connect(&Target::Unix(&socket)).unwrap();
        let mut acked = Vec::new();
        for id in 0..100_000u32 {
            if acked.len() == 50 {
                let _ = started.send(());
            }
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + id).to_string();
            let rule =
                json!({"id": id, "match": {"dst_prefix": format!("{ip}/32")}, "action": "drop"});
            match c.call(
                "apply",
                json!({"updates": [{"op": "insert", "rule": rule}]}),
            ) {
                Ok(r) if r["result"]["results"][0]["code"] == "ok" => acked.push(id),
                Ok(r) => panic!("unexpected answer {r}"),
                Err(_) => break, // the server died mid-request
            }
        }
        acked
    });
    // Killed once 50 batches were acknowledged, with more in flight.
    pushing
        .recv()
        .expect("the pusher got 50 batches acknowledged");
    srv.child.kill().unwrap(); // SIGKILL
    srv.child.wait().unwrap();
    let acked = pusher.join().unwrap();
    drop(srv);
    let _ = std::fs::remove_file(dir.join("ctl.sock"));
    let srv = Server::start(&dir, 20_000, |_| {});
    let mut c = srv.client();
    let rules = c.call("rules", json!({"limit": 10000})).unwrap()["result"].clone();
    let ids: std::collections::HashSet<u64> = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    for id in &acked {
        assert!(ids.contains(&u64::from(*id)), "acknowledged rule {id} lost");
    }
    // At most the one batch in flight at the kill may have landed unacknowledged.
    assert!(
        ids.len() <= acked.len() + 1,
        "{} rules, {} acked",
        ids.len(),
        acked.len()
    );
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// Workers that fall behind lose bursts as `rx_dropped` (a NIC's behaviour)
/// instead of stalling the reader, every frame is accounted for, and the
/// control socket keeps answering under full load.
#[test]
fn overload_drops_are_counted_and_control_stays_responsive() {
    let dir = tmpdir("overload");
    let srv = Server::start_with(
        &dir,
        0,
        |c| c.dataplane.overload = Overload::Drop,
        false,
        &[],
    );
    let mut c = srv.client();
    // Answered at all under full load (how fast is the control-path
    // benchmark's business, not a test's).
    for _ in 0..50 {
        assert_eq!(c.call("ping", json!({})).unwrap()["result"]["pong"], true);
    }
    drop(c);
    let fin = srv.stop();
    let (packets, dropped, read) = (
        fin["totals"]["packets"].as_u64().unwrap(),
        fin["rx_dropped"].as_u64().unwrap(),
        fin["replay"]["frames_read"].as_u64().unwrap(),
    );
    assert!(packets > 0 && read > 0);
    assert_eq!(
        packets + dropped,
        read,
        "every frame processed or counted as dropped"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `replace` applies only the difference to the intended set, as one
/// batch: an unchanged rule keeps its counters (it was not reinstalled), a
/// second identical `replace` changes nothing, a bad set changes nothing.
#[test]
fn replace_applies_only_the_difference() {
    let dir = tmpdir("replace");
    let srv = Server::start(&dir, 2000, |_| {});
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([
            {"op": "insert", "rule": flow_rule(1, gen::PAIR_A, json!("count"))},
            {"op": "insert", "rule": flow_rule(2, gen::PAIR_B, json!("count"))},
            {"op": "insert", "rule": flow_rule(3, ([9, 9, 9, 9], [8, 8, 8, 8]), json!("drop"))},
        ]),
    );
    assert_eq!(codes(&r), ["ok", "ok", "ok"]);
    let get = |c: &mut Client, id: u32| c.call("get", json!({"id": id})).unwrap();
    wait_for("rule 1 counts packets", || {
        get(&mut c, 1)["result"]["packets"].as_u64() > Some(10)
    });
    let g0 = r["generation"].as_u64().unwrap();
    let desired = json!([
        flow_rule(1, gen::PAIR_A, json!("count")), // unchanged
        flow_rule(2, gen::PAIR_B, json!("drop")),  // modified
        flow_rule(4, ([7, 7, 7, 7], [6, 6, 6, 6]), json!("drop")), // new; 3 goes
    ]);
    let before = get(&mut c, 1)["result"]["packets"].as_u64().unwrap();
    let r = c.call("replace", json!({ "rules": desired })).unwrap();
    let res = &r["result"];
    assert_eq!(res["applied"], true, "{r}");
    assert_eq!(
        res["replace"],
        json!({"inserted": 1, "modified": 1, "deleted": 1, "unchanged": 1}),
        "{r}"
    );
    assert_eq!(res["generation"].as_u64(), Some(g0 + 1), "one batch");
    assert!(
        get(&mut c, 1)["result"]["packets"].as_u64().unwrap() >= before,
        "the unchanged rule was reinstalled (its counter restarted)"
    );
    assert_eq!(get(&mut c, 3)["error"]["code"], -32005, "rule 3 is gone");
    assert_eq!(get(&mut c, 2)["result"]["action"], "drop");
    // The same set again: nothing to do, the generation stays.
    let r = c.call("replace", json!({ "rules": desired })).unwrap();
    assert_eq!(r["result"]["generation"].as_u64(), Some(g0 + 1), "{r}");
    assert_eq!(r["result"]["replace"]["unchanged"], 3, "{r}");
    // A set that repeats an id is refused whole.
    let bad = json!([
        flow_rule(9, gen::PAIR_A, json!("drop")),
        flow_rule(9, gen::PAIR_B, json!("drop"))
    ]);
    let r = c.call("replace", json!({ "rules": bad })).unwrap();
    assert!(
        r["error"]["message"].as_str().unwrap().contains("twice"),
        "{r}"
    );
    let n = c.call("rules", json!({})).unwrap()["result"]["total"].clone();
    assert_eq!(n, 3);
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// Sends `bytes` on a fresh TCP connection and reads until the server
/// closes it (a 10 s read timeout turns "never closed" into a failure).
fn tcp_exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .expect("the server closes the connection");
    String::from_utf8(out).unwrap()
}

/// The TCP door (security review, items 2 and 3): nothing but `hello` with
/// the token is served, a browser's POST to the port installs nothing, a
/// bad line closes the connection, and TCP clients cannot take the Unix
/// socket's slots.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn tcp_door_wants_the_token_and_leaves_the_unix_socket_its_slots() {
    let dir = tmpdir("tcp-auth");
    let token_file = dir.join("secret/cfdp.token");
    let mut srv = Server::start(&dir, 5000, |c| {
        c.control.tcp = "127.0.0.1:0".into();
        c.control.token_file = token_file.display().to_string();
        c.control.max_connections = 4;
        c.control.max_connections_per_peer = 4;
    });
    let tcp = srv.port(TCP);
    let addr = format!("127.0.0.1:{tcp}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let token = cfdp_control::auth::Token::read(&token_file).unwrap();
    let drop_all = r#"{"jsonrpc":"2.0","id":1,"method":"apply","params":{"updates":[{"op":"insert","rule":{"id":9,"match":{"dst_prefix":"0.0.0.0/0"},"action":"drop"}}]}}"#;
    // The review's cross-site POST: closed at its request line.
    let post = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{tcp}\r\nContent-Type: text/plain\r\n\r\nx\n{drop_all}\n"
    );
    assert_eq!(tcp_exchange(&addr, post.as_bytes()), "");
    // A request without the token: refused, and the connection closed.
    let out = tcp_exchange(&addr, format!("{drop_all}\n{drop_all}\n").as_bytes());
    assert_eq!(out.lines().count(), 1, "{out}");
    let reply: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(reply["error"]["code"], -32006, "{reply}");
    // A wrong token: the same.
    let wrong = format!(
        r#"{{"id":1,"method":"hello","params":{{"token":"{}x"}}}}"#,
        token.as_str()
    );
    let out = tcp_exchange(&addr, format!("{wrong}\n{drop_all}\n").as_bytes());
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("-32006"), "{out}");
    // A whole batch as the first line, before any token: not read past
    // HELLO_MAX_BYTES, let alone parsed into updates; closed.
    let big = format!(
        r#"{{"id":1,"method":"apply","params":{{"updates":[{}]}}}}"#,
        vec![r#"{"op":"delete","id":1}"#; 2000].join(",")
    );
    assert!(big.len() > cfdp_control::server::HELLO_MAX_BYTES);
    let out = tcp_exchange(
        &addr,
        format!("{big}\n{hello_later}\n", hello_later = "{}").as_bytes(),
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("max_line_bytes = 4096"), "{out}");
    // Nothing was installed.
    let rules = srv.client().call("rules", json!({})).unwrap();
    assert_eq!(rules["result"]["total"], 0, "{rules}");
    // With the token: served; a line that is not a request closes.
    let hello = format!(
        r#"{{"id":1,"method":"hello","params":{{"token":"{}"}}}}"#,
        token.as_str()
    );
    let out = tcp_exchange(
        &addr,
        format!("{hello}\n{{\"id\":2,\"method\":\"ping\"}}\nnot json\n{{\"id\":3,\"method\":\"ping\"}}\n")
            .as_bytes(),
    );
    let ids: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone())
        .collect();
    assert_eq!(ids, [json!(1), json!(2), Value::Null], "{out}");
    // Slots: 4 in all, one kept for the Unix socket.
    let target = Target::Tcp {
        addr: &addr,
        token: token.as_str(),
    };
    let held: Vec<Client> = (0..3).map(|_| Client::connect(&target).unwrap()).collect();
    let out = tcp_exchange(&addr, b"");
    assert!(out.contains("kept for the Unix socket"), "{out}");
    let mut owner = srv.client();
    assert!(owner
        .call("ping", json!({}))
        .unwrap()
        .get("result")
        .is_some());
    drop(held);
    drop(owner);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// The metrics endpoint (security review, item 6): a client trickling its
/// request a byte at a time, forever, holds one handler, not the endpoint:
/// real scrapes are answered meanwhile.
#[test]
fn a_trickling_metrics_client_does_not_block_scrapes() {
    let dir = tmpdir("metrics-slowloris");
    let mut srv = Server::start(&dir, 1000, |c| c.control.metrics = "127.0.0.1:0".into());
    let metrics = srv.port(METRICS);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (connected, trickling) = std::sync::mpsc::channel();
    let trickler = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
            s.write_all(b"G").unwrap();
            connected.send(()).unwrap();
            // A byte every 200 ms (pacing, not waiting for anything): the
            // old endpoint's per-read timeout (2 s) never fired.
            for b in b"ET /metrics HTTP/1.0\r\nX-Slow: ".iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    trickling.recv().unwrap();
    // Each scrape must come back (`scrape`'s read timeout makes a blocked
    // endpoint a failure instead of a hang).
    for _ in 0..3 {
        let body = scrape(metrics);
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickler.join().unwrap();
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// `cfdp ctl trace` against a running node: the JSON answer names the
/// winner and every match in order, `--text` prints them for a person, and
/// a bad 5-tuple is refused naming the field.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn ctl_trace_answers_from_the_running_tables() {
    let dir = tmpdir("trace");
    let srv = Server::start(&dir, 1000, |_| {});
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([
            {"op": "insert", "rule": {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"}},
            {"op": "insert", "rule": {"id": 2, "match": {"dst_prefix": "10.1.0.0/16", "proto": "udp", "port": 53}, "action": "drop"}},
            {"op": "insert", "rule": {"id": 3, "priority": 7, "match": {"src_prefix": "192.0.2.0/24", "dst_prefix": "10.0.0.0/8", "dport": "50-60"}, "action": "count"}}
        ]),
    );
    assert_eq!(codes(&r), ["ok", "ok", "ok"]);
    let ctl = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .arg("ctl")
            .arg("--socket")
            .arg(&srv.socket)
            .arg("trace")
            .args(args)
            .output()
            .unwrap()
    };
    let five = [
        "--src",
        "192.0.2.9",
        "--dst",
        "10.1.2.3",
        "--proto",
        "udp",
        "--sport",
        "999",
        "--dport",
        "53",
    ];
    let out = ctl(&five);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["result"];
    assert_eq!(t["rule"]["id"], 2, "{t}");
    let ids: Vec<u64> = t["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [2, 1, 3], "{t}");
    assert_eq!(t["consistent"], true);
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["decided_by"], "verify table", "{t}");
    let mut text_args = five.to_vec();
    text_args.push("--text");
    let out = ctl(&text_args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("verdict  rule 2 "), "{text}");
    assert!(text.contains("rule 3 priority 7"), "{text}");
    assert!(text.contains("dst /16 udp/53: filter entry"), "{text}");
    let out = ctl(&[
        "--src",
        "192.0.2.9",
        "--dst",
        "2001:db8::1",
        "--proto",
        "icmp",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().starts_with("dst:"),
        "{v}"
    );
    eprintln!("{text}");
    // A frame of a capture instead of a 5-tuple: the last IPv6 fragment of
    // the generated capture's udp/5353 datagram, read by `ctl` with its
    // fragment state, takes its first fragment's ports and so the node's
    // port rule.
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": {"id": 6, "match": {"dst_prefix": "2001:db8:ffff::/48", "proto": "udp", "port": 5353}, "action": "drop"}}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    let later = gen::mixed()
        .iter()
        .rposition(|f| f.note == "IPv6 fragment of udp/5353 (rule 6)")
        .unwrap()
        + 1;
    let mixed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pcap/mixed.pcap");
    let frame_args = [
        "--pcap",
        mixed.to_str().unwrap(),
        "--frame",
        &later.to_string(),
    ];
    let out = ctl(&frame_args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["fragment"]
            .as_str()
            .unwrap()
            .contains("ports 5353 -> 5353 from its first fragment"),
        "{v}"
    );
    assert_eq!(v["trace"]["rule"]["id"], 6, "{v}");
    assert_eq!(v["frame"], later, "{v}");
    let mut text_args = frame_args.to_vec();
    text_args.push("--text");
    let out = ctl(&text_args);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("from its first fragment"), "{text}");
    assert!(text.contains("verdict  rule 6 "), "{text}");
    // Both a 5-tuple and a frame, or neither: a usage error.
    let out = ctl(&[
        "--pcap",
        mixed.to_str().unwrap(),
        "--frame",
        "1",
        "--src",
        "10.0.0.1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = ctl(&["--pcap", mixed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// `cfdp top` in a real terminal (tmux): it shows the node's generation,
/// its workers' packet rates and its busiest rule, and quits on `q`.
/// Skipped without tmux unless `REQUIRE_TMUX` is set (CI installs it).
#[test]
fn top_runs_in_a_terminal_and_quits_on_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("REQUIRE_TMUX").is_none(),
            "REQUIRE_TMUX is set, but there is no tmux (apt-get install tmux)"
        );
        eprintln!("top test skipped: no tmux (apt-get install tmux)");
        return;
    }
    let dir = tmpdir("top");
    let srv = Server::start(&dir, 5000, |_| {});
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": flow_rule(77, gen::PAIR_A, json!("count"))}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    let server = format!("cfdp-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &server])
            .args(args)
            .output()
            .unwrap()
    };
    let cmd = format!(
        "{} top --socket {} --interval-ms 200",
        env!("CARGO_BIN_EXE_cfdp"),
        srv.socket.display()
    );
    let out = tmux(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "40",
        &cmd,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut screen = String::new();
    wait_for(
        "top shows the node, its worker and rule 77 counting",
        || {
            screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "top"]).stdout)
                .into_owned();
            screen.contains("cfdp top")
                && screen.contains("generation 1")
                && screen.lines().any(|l| {
                    // The rule's row with a rate measured (not the first "…").
                    let cells: Vec<&str> = l.trim_matches(['│', ' ']).split_whitespace().collect();
                    cells.first() == Some(&"77")
                        && cells.get(1).and_then(|r| r.parse::<f64>().ok()) > Some(0.0)
                })
        },
    );
    assert!(screen.contains("packets/s"), "{screen}");
    // `cfdp run` keeps a connection table: its line is there, empty.
    assert!(screen.contains("connections 0 of 65536"), "{screen}");
    eprintln!("{screen}");
    tmux(&["send-keys", "-t", "top", "q"]);
    wait_for("top quits on q", || {
        !tmux(&["has-session", "-t", "top"]).status.success()
    });
    tmux(&["kill-server"]);
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// A query to Prometheus's HTTP API: the `result` vector's values.
fn prom_query(port: u16, q: &str) -> Vec<f64> {
    let enc: String = q
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return Vec::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(s, "GET /api/v1/query?query={enc} HTTP/1.0\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    let Some(json) = body.split("\r\n\r\n").nth(1) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["value"][1].as_str()?.parse().ok())
        .collect()
}

/// A real Prometheus (Debian's `prometheus`) scrapes a running node with
/// the shipped rule file (`configs/prometheus/cfdp.rules.yml`, checked by
/// `promtool` first): packet rates, a rule's counter and a burst-time
/// quantile come out of its query API, and the recording rules evaluate.
/// Skipped without the binary unless `REQUIRE_PROMETHEUS` is set (CI
/// installs it).
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn prometheus_scrapes_and_evaluates_the_shipped_rules() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("REQUIRE_PROMETHEUS").is_none(),
            "REQUIRE_PROMETHEUS is set, but there is no prometheus (apt-get install prometheus)"
        );
        eprintln!("prometheus test skipped: no prometheus (apt-get install prometheus)");
        return;
    }
    let rules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs/prometheus/cfdp.rules.yml");
    let check = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let dir = tmpdir("prometheus");
    let mut srv = Server::start(&dir, 5000, |c| c.control.metrics = "127.0.0.1:0".into());
    let metrics = srv.port(METRICS);
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": flow_rule(7, gen::PAIR_B, json!("count"))}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules:?}\n\
             scrape_configs:\n  - job_name: cfdp\n    static_configs:\n      - targets: [\"127.0.0.1:{metrics}\"]\n"
        ),
    )
    .unwrap();
    let mut p = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        // A port it picks, read back from its log ("Listening on"
        // address=127.0.0.1:PORT): none probed free here and released.
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("prometheus.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let prom = prometheus_port(&dir.join("prometheus.log"), &mut p);
    let positive = |q: &str| {
        prom_query(prom, q)
            .first()
            .is_some_and(|v| v.is_finite() && *v > 0.0)
    };
    let start = Instant::now();
    let wanted = [
        "up{job=\"cfdp\"}",
        "cfdp:packets:rate1m",
        "rate(cfdp_rule_packets_total{rule=\"7\"}[10s])",
        "histogram_quantile(0.99, sum by (le) (rate(cfdp_burst_duration_seconds_bucket[10s])))",
        "cfdp:burst_duration_seconds:p99_1m",
        "cfdp_generation",
    ];
    let mut missing: Vec<&str> = wanted.to_vec();
    while !missing.is_empty() {
        missing.retain(|q| !positive(q));
        if start.elapsed() > Duration::from_secs(60) {
            let _ = p.kill();
            panic!(
                "no positive answer from Prometheus for {missing:?}: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = p.kill();
    let _ = p.wait();
    drop(c);
    srv.stop();
    std::fs::remove_dir_all(&dir).ok();
}

/// The port Prometheus listens on, from its log's `msg="Listening on"
/// address=HOST:PORT` (60 s at most, and not once it has exited).
fn prometheus_port(log: &Path, p: &mut std::process::Child) -> u16 {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let port = text
            .lines()
            .filter(|l| l.contains("msg=\"Listening on\""))
            .find_map(|l| {
                l.split("address=")
                    .nth(1)?
                    .rsplit(':')
                    .next()?
                    .trim()
                    .parse()
                    .ok()
            });
        if let Some(port) = port {
            return port;
        }
        assert!(
            matches!(p.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(60),
            "Prometheus never said where it listens: {text}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A stateful rule inserted into a running node opens its connection; the
/// connection's later packets are decided by it, `conns` lists it (and
/// filters it out by source), `stats` and the Prometheus export count it.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn a_stateful_rule_tracks_its_connection_and_conns_lists_it() {
    let dir = tmpdir("conns");
    let mut srv = Server::start(&dir, 5000, |c| {
        c.control.metrics = "127.0.0.1:0".into();
        c.conntrack.accounting = true;
    });
    let metrics = srv.port(METRICS);
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": {"id": 1, "priority": 5,
            "match": {"src_prefix": "10.9.0.1/32", "proto": "udp"},
            "action": "count", "track": true}}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    wait_for("the connection's own packets", || {
        let s = c.call("stats", json!({})).unwrap();
        s["result"]["totals"]["ct_established"].as_u64() > Some(10)
    });
    let s = c.call("stats", json!({})).unwrap();
    let ct = &s["result"]["conntrack"];
    assert_eq!(ct["opened"], 1, "{ct}");
    assert_eq!(ct["by_state"]["UDP_UNREPLIED"], 1, "{ct}");
    assert_eq!(s["result"]["totals"]["ct_opened"], 1);
    let l = c
        .call("conns", json!({"src": "10.9.0.0/24", "proto": "udp"}))
        .unwrap();
    let conns = l["result"]["conns"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{l}");
    let e = &conns[0];
    assert_eq!(
        (
            &e["src"],
            &e["dst"],
            &e["dport"],
            &e["state"],
            &e["rule"],
            &e["action"]
        ),
        (
            &json!("10.9.0.1"),
            &json!("10.9.0.2"),
            &json!(2000),
            &json!("UDP_UNREPLIED"),
            &json!(1),
            &json!("count")
        ),
        "{e}"
    );
    assert!(e["packets"][0].as_u64() > Some(10), "{e}");
    // `trace` says the connection decides, both ways.
    for (src, dst, sp, dp, dir) in [
        ("10.9.0.1", "10.9.0.2", 1000, 2000, "original"),
        ("10.9.0.2", "10.9.0.1", 2000, 1000, "reply"),
    ] {
        let t = c
            .call(
                "trace",
                json!({"src": src, "dst": dst, "proto": "udp", "sport": sp, "dport": dp}),
            )
            .unwrap();
        let conn = &t["result"]["connection"];
        assert_eq!(conn["direction"], dir, "{t}");
        assert_eq!(
            (&conn["state"], &conn["rule"]),
            (&json!("UDP_UNREPLIED"), &json!(1))
        );
    }
    let none = c.call("conns", json!({"src": "10.9.0.3"})).unwrap();
    assert_eq!(none["result"]["conns"], json!([]), "{none}");
    let bad = c.call("conns", json!({"limit": 0})).unwrap();
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("limit"),
        "{bad}"
    );
    let text = scrape(metrics);
    assert!(
        text.contains("cfdp_conntrack_entries{state=\"UDP_UNREPLIED\"} 1"),
        "{text}"
    );
    // Deleting the rule leaves the connection (as nftables does) but it no
    // longer names a rule.
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "delete", "id": 1}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    let l = c.call("conns", json!({})).unwrap();
    assert_eq!(l["result"]["conns"][0]["rule"], Value::Null, "{l}");
    srv.stop();
}

/// A graceful stop (SIGTERM) saves the connection table in `state_dir` and
/// the next start restores it (the connection is not opened again: its
/// counters carry on); after a SIGKILL the next start says the table was
/// lost.
#[test]
fn tracked_connections_survive_a_graceful_restart_not_a_crash() {
    let dir = tmpdir("conns-restart");
    let acct = |c: &mut RunConfig| c.conntrack.accounting = true;
    let srv = Server::start(&dir, 5000, acct);
    let mut c = srv.client();
    let r = apply(
        &mut c,
        "rollback_on_error",
        json!([{"op": "insert", "rule": {"id": 1, "priority": 5,
            "match": {"src_prefix": "10.9.0.1/32", "proto": "udp"},
            "action": "allow", "track": true}}]),
    );
    assert_eq!(codes(&r), ["ok"]);
    wait_for("the connection's own packets", || {
        let s = c.call("stats", json!({})).unwrap();
        s["result"]["totals"]["ct_established"].as_u64() > Some(10)
    });
    let before = c.call("conns", json!({})).unwrap()["result"]["conns"][0]["packets"][0]
        .as_u64()
        .unwrap();
    drop(c);
    srv.stop();
    let srv = Server::start(&dir, 5000, acct);
    assert!(
        srv.stderr().contains("restored 1 of 1 tracked connections"),
        "{}",
        srv.stderr()
    );
    let mut c = srv.client();
    let l = c.call("conns", json!({})).unwrap();
    let e = &l["result"]["conns"][0];
    assert_eq!(
        (&e["rule"], &e["state"]),
        (&json!(1), &json!("UDP_UNREPLIED")),
        "{l}"
    );
    assert!(
        e["packets"][0].as_u64() >= Some(before),
        "{e} after {before}"
    );
    let s = c.call("stats", json!({})).unwrap();
    assert_eq!(
        s["result"]["conntrack"]["opened"], 0,
        "restored, not opened again"
    );
    drop(c);
    drop(srv); // SIGKILL: nothing saved
    let srv = Server::start(&dir, 5000, |_| {});
    assert!(
        srv.stderr().contains("did not stop cleanly"),
        "{}",
        srv.stderr()
    );
    srv.stop();
}
