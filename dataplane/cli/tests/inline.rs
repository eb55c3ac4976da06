//! cfdp inline on real links: two network namespaces with real kernel
//! stacks, joined through `cfdp run` (DPDK `net_af_packet`, or
//! `net_af_xdp`, on veth pairs, `xconnect`) — the lab of
//! `dataplane/dpdk/scripts/veth-lab.sh`.
//!
//! Needs root (namespaces, veths, AF_PACKET), iproute2, ethtool and ping,
//! and a build with `--features dpdk`. Without root or those tools each test
//! says so and returns — unless `REQUIRE_INLINE_LAB` is set (CI sets it),
//! which makes that a failure.
//!
//! Sockets on either side are opened by a thread that entered the
//! namespace (`setns`): a socket keeps its namespace for life, so the test
//! then uses it from any thread.
#![cfg(feature = "dpdk")]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cfdp_control::client::{Client, Target};
use serde_json::{json, Value};

/// The labs busy-poll a core each: one at a time on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p)
}

fn script() -> PathBuf {
    repo("dataplane/dpdk/scripts/veth-lab.sh")
}

/// Why the lab cannot run here, if it cannot (a panic where it must).
fn unavailable() -> Option<String> {
    let why = why_unavailable();
    if let Some(w) = &why {
        assert!(
            std::env::var_os("REQUIRE_INLINE_LAB").is_none(),
            "REQUIRE_INLINE_LAB is set, but the inline lab cannot run: {w}"
        );
    }
    why
}

fn why_unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in ["ip", "ethtool", "ping"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} not installed"));
        }
    }
    None
}

/// Two namespaces `{prefix}a` / `{prefix}b` and their veths; removed when
/// dropped, also when the test fails.
struct Lab {
    prefix: String,
}

impl Lab {
    fn up(prefix: &str, qpairs: u16) -> Lab {
        // A lab left by a killed run is removed first.
        let _ = Command::new(script()).args(["down", prefix]).status();
        let lab = Lab {
            prefix: prefix.into(),
        };
        let st = Command::new(script())
            .args(["up", prefix, &qpairs.to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "veth-lab.sh up {prefix} failed");
        lab
    }

    fn ns(&self, side: char) -> String {
        format!("{}{side}", self.prefix)
    }

    /// Runs `f` on a thread inside the namespace of `side`.
    fn within<T: Send>(&self, side: char, f: impl FnOnce() -> T + Send) -> T {
        in_ns(&self.ns(side), f)
    }

    fn ping(&self, from: char, to: &str) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(from), "ping", "-c", "3"])
            .args(["-i", "0.2", "-W", "1", "-q", to])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.prefix]).status();
    }
}

/// A `cfdp run` cross-connecting the lab; killed when dropped.
struct Cfdp {
    child: Option<Child>,
    socket: PathBuf,
    /// Its configuration, rules and socket; removed after the child.
    _dir: tempfile::TempDir,
}

impl Cfdp {
    /// `pmd`: `af_packet` or `af_xdp` (veth-lab.sh's names).
    fn start(lab: &Lab, pmd: &str, qpairs: u16, workers: u16, rules: &str) -> Cfdp {
        Self::start_with(lab, pmd, qpairs, workers, rules, "")
    }

    /// [`Cfdp::start`] with `extra` TOML appended to the configuration.
    fn start_with(
        lab: &Lab,
        pmd: &str,
        qpairs: u16,
        workers: u16,
        rules: &str,
        extra: &str,
    ) -> Cfdp {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("cfdp-inline-{}-", lab.prefix))
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let out = Command::new(script())
            .args(["config", &lab.prefix])
            .args([qpairs.to_string(), workers.to_string(), pmd.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success());
        let socket = dir.join("ctl.sock");
        let rules_file = dir.join("rules.json");
        std::fs::write(&rules_file, rules).unwrap();
        let cfg = String::from_utf8(out.stdout)
            .unwrap()
            .replace(
                &format!("socket = \"/tmp/{}.sock\"", lab.prefix),
                &format!("socket = {socket:?}"),
            )
            .replace("file = \"\"", &format!("file = {rules_file:?}"))
            + extra;
        let cfg_path = dir.join("cfdp.toml");
        std::fs::write(&cfg_path, cfg).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .args(["run", "--config"])
            .arg(&cfg_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let cfdp = Cfdp {
            child: Some(child),
            socket,
            _dir: tmp,
        };
        // Ready once the socket answers (the ports are started before the
        // control thread accepts).
        let start = Instant::now();
        while Client::connect(&Target::Unix(&cfdp.socket)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cfdp
    }

    fn call(&self, method: &str, params: Value) -> Value {
        let mut c = Client::connect(&Target::Unix(&self.socket)).unwrap();
        let r = c.call(method, params).unwrap();
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    fn apply(&self, updates: Value) {
        let r = self.call("apply", json!({ "updates": updates }));
        for u in r["results"].as_array().unwrap() {
            assert_eq!(u["code"], "ok", "{r}");
        }
    }

    /// Stops it with SIGTERM and returns its final JSON line.
    fn stop(mut self) -> Value {
        let child = self.child.take().unwrap();
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "cfdp run failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().rev().find(|l| l.starts_with('{')).unwrap();
        serde_json::from_str(last).unwrap()
    }
}

impl Drop for Cfdp {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Deterministic payload bytes (so a corrupted or reordered transfer shows).
fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// One TCP connection from side A to `server` in side B: A sends `len`
/// bytes and half-closes, B checks them and sends `len` bytes back, A
/// checks those. Both directions carry data through cfdp.
fn tcp_both_ways(lab: &Lab, server: SocketAddr, len: usize) {
    let listener = lab.within('b', || TcpListener::bind(server).unwrap());
    let up = payload(len, 0x5a);
    let down = payload(len, 0xa5);
    std::thread::scope(|s| {
        let srv = s.spawn(|| {
            let (mut c, _) = listener.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            assert!(
                got == up,
                "A→B: {} of {} bytes, or corrupted",
                got.len(),
                len
            );
            c.write_all(&down).unwrap();
        });
        let mut c = lab.within('a', || {
            TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap()
        });
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(&up).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        srv.join().unwrap();
        assert!(
            got == down,
            "B→A: {} of {} bytes, or corrupted",
            got.len(),
            len
        );
    });
}

/// Sends `n` UDP datagrams of `len` bytes (more than the MTU: the kernel
/// fragments them) from A to `server` in B; returns how many arrived whole.
fn big_datagrams(lab: &Lab, server: SocketAddr, len: usize, n: usize) -> usize {
    let rx = lab.within('b', || UdpSocket::bind(server).unwrap());
    rx.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let any: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let tx = lab.within('a', || UdpSocket::bind(any).unwrap());
    let body = payload(len, 0x3c);
    let mut buf = vec![0u8; len + 1];
    let mut whole = 0;
    for _ in 0..n {
        tx.send_to(&body, server).unwrap();
        if matches!(rx.recv(&mut buf), Ok(m) if buf[..m] == body[..]) {
            whole += 1;
        }
    }
    whole
}

/// Datagrams over the MTU to `server` cross in fragments; a port rule
/// (id `id`) on the server's address and port drops every fragment of
/// them; the rule is deleted again.
fn fragments_meet_a_port_rule(lab: &Lab, cfdp: &Cfdp, server: &str, id: u32) {
    let server: SocketAddr = server.parse().unwrap();
    let family = if server.is_ipv4() { "IPv4" } else { "IPv6" };
    let host = match server.ip() {
        std::net::IpAddr::V4(a) => format!("{a}/32"),
        std::net::IpAddr::V6(a) => format!("{a}/128"),
    };
    assert_eq!(
        big_datagrams(lab, server, 4000, 5),
        5,
        "fragmented {family} UDP"
    );
    cfdp.apply(json!([{"op": "insert", "rule": {"id": id, "match": {
        "dst_prefix": host, "proto": "udp", "port": server.port()}, "action": "drop"}}]));
    assert_eq!(
        big_datagrams(lab, server, 4000, 3),
        0,
        "{family} fragments passed a port rule"
    );
    cfdp.apply(json!([{"op": "delete", "id": id}]));
}

/// Whether a TCP connection from A to `server` is established within 2 s.
fn connects(lab: &Lab, server: SocketAddr) -> bool {
    lab.within('a', || {
        TcpStream::connect_timeout(&server, Duration::from_secs(2)).is_ok()
    })
}

/// A live request/response exchange: A sends 64 bytes, B echoes them.
struct Echo {
    client: TcpStream,
    _server: std::thread::JoinHandle<()>,
    local: SocketAddr,
}

impl Echo {
    fn start(lab: &Lab, server: SocketAddr) -> Echo {
        let listener = lab.within('b', || TcpListener::bind(server).unwrap());
        let srv = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            while c.read_exact(&mut buf).is_ok() {
                if c.write_all(&buf).is_err() {
                    return;
                }
            }
        });
        let client = lab.within('a', || {
            TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap()
        });
        let local = client.local_addr().unwrap();
        Echo {
            client,
            _server: srv,
            local,
        }
    }

    /// Sends one message; whether its echo comes back within `wait`.
    fn round_trip(&mut self, n: u8, wait: Duration) -> bool {
        self.client.set_read_timeout(Some(wait)).unwrap();
        self.client.write_all(&[n; 64]).unwrap();
        let mut buf = [0u8; 64];
        self.client.read_exact(&mut buf).is_ok() && buf == [n; 64]
    }

    /// Waits for an echo already on its way (after a blocked round trip,
    /// TCP retransmits it once the path is open again).
    fn echo_arrives(&mut self, n: u8, wait: Duration) -> bool {
        self.client.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 64];
        self.client.read_exact(&mut buf).is_ok() && buf == [n; 64]
    }
}

#[test]
fn kernel_traffic_crosses_cfdp_and_rules_act_on_live_flows() {
    live_flows("af_packet", "ci");
}

/// The same scenario with cfdp on AF_XDP sockets (`net_af_xdp`, generic
/// XDP on the veths) instead of AF_PACKET.
#[test]
fn kernel_traffic_crosses_cfdp_on_af_xdp() {
    live_flows("af_xdp", "cx");
}

/// Ping, TCP both ways, fragments and a port rule on them, a drop rule
/// stopping a live flow and its delete letting it resume, a port rule —
/// through cfdp on `pmd`.
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn live_flows(pmd: &str, prefix: &str) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        eprintln!("inline lab skipped: {why}");
        return;
    }
    let lab = Lab::up(&format!("{prefix}{}", std::process::id() % 100_000), 1);
    let cfdp = Cfdp::start(&lab, pmd, 1, 1, r#"{"rules": []}"#);

    // ARP and ND go through (no rule matches them), then ping both ways.
    assert!(lab.ping('a', "10.77.0.2"), "IPv4 ping A→B");
    assert!(lab.ping('b', "10.77.0.1"), "IPv4 ping B→A");
    assert!(lab.ping('a', "fd77::2"), "IPv6 ping A→B");

    // TCP transfers complete both ways, over IPv4 and IPv6.
    tcp_both_ways(&lab, "10.77.0.2:5001".parse().unwrap(), 4 << 20);
    tcp_both_ways(&lab, "[fd77::2]:5001".parse().unwrap(), 1 << 20);

    // Datagrams over the MTU cross in fragments; a port rule on their
    // destination port drops every fragment of them. IPv6 only: the
    // net_af_packet PMD joins its sockets to a fanout group with
    // PACKET_FANOUT_FLAG_DEFRAG, so the kernel reassembles IPv4 fragments
    // before cfdp sees them, and the whole datagram (over the frame size
    // and the veth MTU) is lost — with dpdk-testpmd as well. IPv4 fragments
    // are tested through net_ring (multi_queue.rs) and the pcap backend.
    fragments_meet_a_port_rule(&lab, &cfdp, "[fd77::2]:6001", 21);
    let totals = cfdp.call("stats", json!({}))["totals"].clone();
    assert!(
        totals["fragments_resolved"].as_u64() >= Some(6),
        "later fragments did not take their first fragment's ports: {totals}"
    );
    if pmd == "af_xdp" {
        // AF_XDP takes frames before the kernel's stack: IPv4 fragments
        // reach cfdp as fragments (no fanout reassembly as with AF_PACKET).
        fragments_meet_a_port_rule(&lab, &cfdp, "10.77.0.2:6002", 22);
    }

    // A drop rule on a live flow's 5-tuple stops it with the batch that
    // installs it; deleting the rule lets it go on.
    let mut echo = Echo::start(&lab, "10.77.0.2:5002".parse().unwrap());
    assert!(
        echo.round_trip(1, Duration::from_secs(5)),
        "echo before the rule"
    );
    cfdp.apply(
        json!([{"op": "insert", "rule": {"id": 10, "match": {"flow": {
        "src": "10.77.0.1", "dst": "10.77.0.2", "proto": "tcp",
        "sport": echo.local.port(), "dport": 5002}}, "action": "drop"}}]),
    );
    assert!(
        !echo.round_trip(2, Duration::from_millis(1500)),
        "the echo came back through a drop rule"
    );
    let hits = cfdp.call("get", json!({"id": 10}))["packets"]
        .as_u64()
        .unwrap();
    assert!(hits >= 1, "the drop rule saw none of the flow's packets");
    cfdp.apply(json!([{"op": "delete", "id": 10}]));
    assert!(
        echo.echo_arrives(2, Duration::from_secs(10)),
        "the flow did not resume after the rule was deleted"
    );
    assert!(
        echo.round_trip(3, Duration::from_secs(5)),
        "echo after delete"
    );

    // A port rule stops TCP to that port; other ports and ping still pass.
    cfdp.apply(json!([{"op": "insert", "rule": {"id": 11, "match": {
        "dst_prefix": "10.77.0.2/32", "proto": "tcp", "port": 5003}, "action": "drop"}}]));
    let _l3 = lab.within('b', || TcpListener::bind("10.77.0.2:5003").unwrap());
    let _l4 = lab.within('b', || TcpListener::bind("10.77.0.2:5004").unwrap());
    assert!(
        !connects(&lab, "10.77.0.2:5003".parse().unwrap()),
        "connected through a port rule"
    );
    assert!(
        connects(&lab, "10.77.0.2:5004".parse().unwrap()),
        "another port is blocked too"
    );
    assert!(
        lab.ping('a', "10.77.0.2"),
        "ping with the port rule in place"
    );
    assert!(
        cfdp.call("get", json!({"id": 11}))["packets"].as_u64() >= Some(1),
        "the port rule counted no SYN"
    );
    drop(echo);

    let fin = cfdp.stop();
    let ports = fin["dpdk"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2, "{fin}");
    for p in ports {
        assert!(p[1]["ipackets"].as_u64() > Some(1000), "{fin}");
        assert!(p[1]["opackets"].as_u64() > Some(1000), "{fin}");
    }
}

#[test]
fn two_workers_on_two_queue_pairs_carry_every_flow() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        eprintln!("inline lab skipped: {why}");
        return;
    }
    let lab = Lab::up(&format!("cq{}", std::process::id() % 100_000), 2);
    let cfdp = Cfdp::start(&lab, "af_packet", 2, 2, r#"{"rules": []}"#);
    assert!(lab.ping('a', "10.77.0.2"), "IPv4 ping A→B");
    // Sixteen UDP flows A→B, each 200 datagrams answered by B: with two
    // queues the flows spread over both workers, and every datagram and
    // every answer arrives exactly once.
    let flows = 16u16;
    let per_flow = 200u32;
    let server = lab.within('b', || UdpSocket::bind("10.77.0.2:6000").unwrap());
    server
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let clients: Vec<UdpSocket> = (0..flows)
        .map(|_| lab.within('a', || UdpSocket::bind("10.77.0.1:0").unwrap()))
        .collect();
    let mut seen = std::collections::HashMap::new();
    for round in 0..per_flow {
        for c in &clients {
            c.send_to(&round.to_le_bytes(), "10.77.0.2:6000").unwrap();
        }
        // Answer what arrived so far (the kernel queue holds the rest).
        for _ in 0..flows {
            let mut buf = [0u8; 16];
            let (n, from) = server.recv_from(&mut buf).unwrap();
            *seen.entry((from, buf[..n].to_vec())).or_insert(0u32) += 1;
            server.send_to(&buf[..n], from).unwrap();
        }
    }
    assert_eq!(seen.len(), (flows as usize) * per_flow as usize);
    assert!(seen.values().all(|&n| n == 1), "a datagram arrived twice");
    for c in &clients {
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut got = 0;
        let mut buf = [0u8; 16];
        while got < per_flow && c.recv(&mut buf).is_ok() {
            got += 1;
        }
        assert_eq!(got, per_flow, "answers lost on the way back");
    }
    tcp_both_ways(&lab, "10.77.0.2:5001".parse().unwrap(), 1 << 20);
    // Fragmented IPv6 datagrams too: all fragments of one reach one
    // worker (the kernel's fanout hash, like a NIC's RSS, leaves ports out
    // for fragments), which resolves the later ones.
    let v6: SocketAddr = "[fd77::2]:6001".parse().unwrap();
    assert_eq!(big_datagrams(&lab, v6, 4000, 20), 20, "fragmented IPv6 UDP");
    let stats = cfdp.call("stats", json!({}));
    let workers = stats["workers"].as_array().expect("per-worker stats");
    assert_eq!(workers.len(), 2, "{stats}");
    for w in workers {
        assert!(
            w["packets"].as_u64() > Some(100),
            "a worker saw (almost) nothing: {stats}"
        );
    }
    cfdp.stop();
}

/// Runs `f` on a thread inside network namespace `ns` (a socket it opens
/// stays there).
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = std::fs::File::open(&path).unwrap();
            rustix::thread::move_into_link_name_space(
                fd.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// An inside host A and an outside host B on either side of a stateful
/// firewall: their namespaces and addresses.
struct Ends {
    a: String,
    b: String,
    a_ip: std::net::Ipv4Addr,
    b_ip: std::net::Ipv4Addr,
}

const NO_WAIT: Duration = Duration::from_millis(800);

impl Ends {
    fn ping(&self, from_a: bool) -> bool {
        let (ns, to) = if from_a {
            (&self.a, self.b_ip)
        } else {
            (&self.b, self.a_ip)
        };
        Command::new("ip")
            .args([
                "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-q",
            ])
            .arg(to.to_string())
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    fn udp(&self, on_a: bool, port: u16) -> UdpSocket {
        let (ns, ip) = if on_a {
            (&self.a, self.a_ip)
        } else {
            (&self.b, self.b_ip)
        };
        let s = in_ns(ns, || UdpSocket::bind((ip, port)).unwrap());
        s.set_read_timeout(Some(NO_WAIT)).unwrap();
        s
    }

    /// A TCP connection from one side to a listener on the other: the
    /// client's and the server's streams (read timeouts set), if it opened.
    fn connect(&self, from_a: bool, port: u16) -> Option<(TcpStream, TcpStream)> {
        let (server_ns, server_ip, client_ns) = if from_a {
            (&self.b, self.b_ip, &self.a)
        } else {
            (&self.a, self.a_ip, &self.b)
        };
        let l = in_ns(server_ns, || TcpListener::bind((server_ip, port)).unwrap());
        let to = SocketAddr::from((server_ip, port));
        let c = in_ns(client_ns, || TcpStream::connect_timeout(&to, NO_WAIT)).ok()?;
        let (s, _) = l.accept().unwrap();
        c.set_read_timeout(Some(NO_WAIT)).unwrap();
        s.set_read_timeout(Some(NO_WAIT)).unwrap();
        Some((c, s))
    }

    /// A TCP connection from one side to a listener on the other, with a
    /// byte each way.
    fn tcp(&self, from_a: bool, port: u16) -> bool {
        let Some((mut c, mut s)) = self.connect(from_a, port) else {
            return false;
        };
        let mut b = [0u8; 1];
        c.write_all(b"q").is_ok()
            && s.read_exact(&mut b).is_ok()
            && s.write_all(b"a").is_ok()
            && c.read_exact(&mut b).is_ok()
    }

    /// A TCP connection from A, a byte, then closed by a FIN each way:
    /// each end reads the other's end of stream.
    fn tcp_close(&self, port: u16) -> bool {
        let Some((mut c, mut s)) = self.connect(true, port) else {
            return false;
        };
        let mut b = [0u8; 1];
        c.write_all(b"q").is_ok()
            && s.read_exact(&mut b).is_ok()
            && c.shutdown(std::net::Shutdown::Write).is_ok()
            && s.read(&mut b).is_ok_and(|n| n == 0)
            && s.shutdown(std::net::Shutdown::Write).is_ok()
            && c.read(&mut b).is_ok_and(|n| n == 0)
    }

    /// A SYN from A to a port of B where nothing listens: B's RST comes
    /// back (the connection is refused rather than timing out).
    fn tcp_refused(&self, port: u16) -> bool {
        let to = SocketAddr::from((self.b_ip, port));
        matches!(
            in_ns(&self.a, || TcpStream::connect_timeout(&to, NO_WAIT)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    }

    /// An ICMP port unreachable that B forges (a raw socket) about UDP from
    /// A's `a_port` to B's `b_port`, after A sent a datagram that way
    /// (`tracked`) or without it: whether it reaches A, whose socket is
    /// connected to that pair and reports the error as a refused
    /// connection.
    fn forged_icmp_error(&self, tracked: bool, a_port: u16, b_port: u16) -> bool {
        let a = self.udp(true, a_port);
        a.connect((self.b_ip, b_port)).unwrap();
        let b = self.udp(false, b_port);
        let mut buf = [0u8; 64];
        if tracked {
            a.send(b"x").unwrap();
            if b.recv_from(&mut buf).is_err() {
                return false;
            }
        }
        // ICMP type 3 code 3, then the quoted IPv4 header and the first 8
        // bytes of its datagram (a UDP header carrying one byte).
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&29u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.a_ip.octets());
        ip[16..20].copy_from_slice(&self.b_ip.octets());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut msg = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&ip);
        msg.extend_from_slice(&a_port.to_be_bytes());
        msg.extend_from_slice(&b_port.to_be_bytes());
        msg.extend_from_slice(&9u16.to_be_bytes());
        msg.extend_from_slice(&[0, 0]);
        let c = checksum(&msg);
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        let to = SocketAddr::from((self.a_ip, 0));
        in_ns(&self.b, || {
            use rustix::net::{ipproto, sendto, socket, AddressFamily, SendFlags, SocketType};
            let raw = socket(AddressFamily::INET, SocketType::RAW, Some(ipproto::ICMP)).unwrap();
            sendto(&raw, &msg, SendFlags::empty(), &to).unwrap();
        });
        matches!(a.recv(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    }

    /// The scripted traffic; what arrived, step by step. `forgotten(a_port,
    /// b_port)`: whether the firewall no longer tracks UDP between A's and
    /// B's ports (its timeout passed and the entry went) — the late
    /// datagram waits for that, not for a time.
    fn script(&self, forgotten: &dyn Fn(u16, u16) -> bool) -> Vec<(&'static str, bool)> {
        // Warm up alike on both: the path carries traffic (cfdp's ports
        // take a moment after start) and A knows B's address.
        let start = Instant::now();
        while !self.ping(true) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "A never reached B"
            );
        }
        let mut out = Vec::new();
        out.push((
            "TCP opened from inside, a byte each way",
            self.tcp(true, 5101),
        ));
        out.push(("TCP opened from outside", self.tcp(false, 5102)));
        // UDP request and response.
        let (qa, rb) = (self.udp(true, 5103), self.udp(false, 5104));
        qa.send_to(b"query", (self.b_ip, 5104)).unwrap();
        let mut buf = [0u8; 64];
        let asked = rb.recv_from(&mut buf).map(|(_, from)| from);
        let answered = asked.is_ok_and(|from| rb.send_to(b"answer", from).is_ok())
            && qa.recv_from(&mut buf).is_ok();
        out.push(("UDP request and its response", answered));
        // An unsolicited datagram from outside.
        let (la, sb) = (self.udp(true, 5105), self.udp(false, 5106));
        sb.send_to(b"hello", (self.a_ip, 5105)).unwrap();
        out.push((
            "UDP from outside, unsolicited",
            la.recv_from(&mut buf).is_ok(),
        ));
        out.push(("ICMP echo from inside", self.ping(true)));
        out.push(("ICMP echo from outside", self.ping(false)));
        // A datagram to a closed port outside: its port unreachable is
        // related to the connection it opened and comes back.
        let ca = self.udp(true, 5107);
        ca.connect((self.b_ip, 5999)).unwrap();
        ca.send(b"anyone?").unwrap();
        let refused = matches!(ca.recv(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused);
        out.push(("ICMP port unreachable about a tracked connection", refused));
        // A connection used again after its timeout: the outside's late
        // datagram is unsolicited by then.
        let (ta, tb) = (self.udp(true, 5108), self.udp(false, 5109));
        ta.send_to(b"open", (self.b_ip, 5109)).unwrap();
        let opened = tb.recv_from(&mut buf).is_ok();
        let start = Instant::now();
        while !forgotten(5108, 5109) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the firewall still tracks the idle UDP connection after a minute"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        tb.send_to(b"late", (self.a_ip, 5108)).unwrap();
        let late = ta.recv_from(&mut buf).is_ok();
        out.push(("UDP answer after the connection timed out", opened && late));
        out.push((
            "TCP from inside closed by a FIN each way, both ends see it",
            self.tcp_close(5110),
        ));
        out.push((
            "TCP SYN from inside to a closed port: its RST comes back",
            self.tcp_refused(5111),
        ));
        out.push((
            "a forged ICMP error about a tracked connection",
            self.forged_icmp_error(true, 5112, 5113),
        ));
        out.push((
            "a forged ICMP error about an untracked connection",
            self.forged_icmp_error(false, 5114, 5115),
        ));
        out
    }
}

/// A Linux router between two hosts with the nftables ruleset equivalent
/// to cfdp's stateful rules: `ct state established,related accept`, the
/// inside's TCP, UDP and ICMP accepted, everything else dropped. Removed
/// when dropped.
struct LinuxRouter {
    prefix: String,
}

impl LinuxRouter {
    fn up(prefix: &str, udp_timeout_s: u64) -> LinuxRouter {
        let r = LinuxRouter {
            prefix: prefix.into(),
        };
        r.down();
        let p = prefix;
        let sh = |cmd: String| {
            let st = Command::new("sh").args(["-ec", &cmd]).status().unwrap();
            assert!(st.success(), "{cmd}");
        };
        sh(format!(
            "ip netns add {p}a; ip netns add {p}r; ip netns add {p}b
             ip link add {p}a0 type veth peer name {p}ra; ip link add {p}b0 type veth peer name {p}rb
             ip link set {p}a0 netns {p}a; ip link set {p}ra netns {p}r
             ip link set {p}b0 netns {p}b; ip link set {p}rb netns {p}r
             for n in a r b; do ip -n {p}$n link set lo up; done
             ip -n {p}a addr add 10.78.1.2/24 dev {p}a0; ip -n {p}a link set {p}a0 up
             ip -n {p}b addr add 10.78.2.2/24 dev {p}b0; ip -n {p}b link set {p}b0 up
             ip -n {p}r addr add 10.78.1.1/24 dev {p}ra; ip -n {p}r link set {p}ra up
             ip -n {p}r addr add 10.78.2.1/24 dev {p}rb; ip -n {p}r link set {p}rb up
             ip -n {p}a route add default via 10.78.1.1
             ip -n {p}b route add default via 10.78.2.1
             ip netns exec {p}r sysctl -qw net.ipv4.ip_forward=1"
        ));
        let ruleset = "table inet cfdp_anchor {
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    ip saddr 10.78.1.0/24 meta l4proto { tcp, udp, icmp } accept
  }
}
";
        cfdp_testkit::crafted::load_nftables(&format!("{p}r"), ruleset);
        sh(format!(
            "ip netns exec {p}r sysctl -qw net.netfilter.nf_conntrack_udp_timeout={udp_timeout_s} \
             net.netfilter.nf_conntrack_udp_timeout_stream={udp_timeout_s}"
        ));
        r
    }

    /// Whether the router's conntrack has no entry for UDP from A's
    /// `a_port` to B's `b_port` (its table, as `/proc/net/nf_conntrack`
    /// in its namespace lists it: no `conntrack` tool needed).
    fn forgotten(&self, a_port: u16, b_port: u16) -> bool {
        let out = Command::new("ip")
            .args(["netns", "exec", &format!("{}r", self.prefix)])
            .args(["cat", "/proc/net/nf_conntrack"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no /proc/net/nf_conntrack in the router"
        );
        let (sport, dport) = (format!("sport={a_port}"), format!("dport={b_port}"));
        !String::from_utf8_lossy(&out.stdout).lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.contains(&"udp") && words.contains(&&*sport) && words.contains(&&*dport)
        })
    }

    fn ends(&self) -> Ends {
        Ends {
            a: format!("{}a", self.prefix),
            b: format!("{}b", self.prefix),
            a_ip: [10, 78, 1, 2].into(),
            b_ip: [10, 78, 2, 2].into(),
        }
    }

    fn down(&self) {
        for n in ["a", "r", "b"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{}{n}", self.prefix)])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for LinuxRouter {
    fn drop(&mut self) {
        self.down();
    }
}

/// The anchor against Linux: the same scripted traffic through cfdp with
/// stateful rules (inline, `net_af_packet`) and through a Linux router
/// with the equivalent nftables ruleset, UDP timeouts shortened alike;
/// what arrives at each end must be the same, step by step.
#[test]
fn stateful_rules_let_through_what_nftables_conntrack_does() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        eprintln!("inline lab skipped: {why}");
        return;
    }
    let has_nft = Command::new("sh")
        .args(["-c", "command -v nft"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_nft {
        assert!(
            std::env::var_os("REQUIRE_INLINE_LAB").is_none(),
            "REQUIRE_INLINE_LAB is set, but nft is not installed (apt-get install nftables)"
        );
        eprintln!("nftables anchor skipped: nft not installed");
        return;
    }
    let timeout = Duration::from_secs(2);
    let id = std::process::id() % 100_000;
    let linux = {
        let router = LinuxRouter::up(&format!("nf{id}"), timeout.as_secs());
        router.ends().script(&|a, b| router.forgotten(a, b))
    };
    let lab = Lab::up(&format!("st{id}"), 1);
    let rules = r#"{"rules": [
      {"id": 1, "priority": 10, "match": {"src_prefix": "10.77.0.1/32", "proto": "tcp"}, "action": "allow", "track": true},
      {"id": 2, "priority": 10, "match": {"src_prefix": "10.77.0.1/32", "proto": "udp"}, "action": "allow", "track": true},
      {"id": 3, "priority": 10, "match": {"src_prefix": "10.77.0.1/32", "proto": "icmp"}, "action": "allow", "track": true},
      {"id": 9, "priority": 1, "match": {"src_prefix": "10.77.0.0/24"}, "action": "drop"}
    ]}"#;
    let extra = format!(
        "\n[conntrack.timeouts]\nudp_unreplied_s = {0}\nudp_replied_s = {0}\n",
        timeout.as_secs()
    );
    let cfdp = Cfdp::start_with(&lab, "af_packet", 1, 1, rules, &extra);
    let ends = Ends {
        a: lab.ns('a'),
        b: lab.ns('b'),
        a_ip: [10, 77, 0, 1].into(),
        b_ip: [10, 77, 0, 2].into(),
    };
    // cfdp's table lists an entry past its timeout until a sweep takes
    // it (and a packet meeting it then treats it as gone): listed no
    // more is past the timeout either way.
    let ours = ends.script(&|a, _| {
        let r = cfdp.call("conns", json!({"proto": "udp", "port": a}));
        r["conns"].as_array().is_some_and(Vec::is_empty)
    });
    let stats = cfdp.call("stats", json!({}));
    eprintln!("linux: {linux:?}\ncfdp:  {ours:?}");
    assert_eq!(
        ours, linux,
        "cfdp and nftables let different traffic through"
    );
    // And what a stateful firewall should let through, so that the two
    // agreeing on nothing would not pass.
    let want = [
        true, false, true, false, true, false, true, false, true, true, true, false,
    ];
    assert_eq!(ours.iter().map(|o| o.1).collect::<Vec<_>>(), want);
    assert!(
        stats["totals"]["ct_established"].as_u64() > Some(0),
        "{stats}"
    );
    assert!(stats["totals"]["ct_related"].as_u64() > Some(0), "{stats}");
    cfdp.stop();
}

/// The Internet checksum (RFC 1071) of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
