//! The DPDK backend on virtual devices (`cargo test -p cfdp
//! --features dpdk`; needs the system DPDK, no NIC, no hugepages): the same
//! captures and rule files as the pcap-backend tests give the same forwarded
//! packets and counters, and the control socket works the same.
//!
//! Each case runs a real `cfdp run` process, so each gets its own EAL (DPDK
//! allows one initialisation per process) with a unique `--file-prefix`.
//!
//! Flow export from the DPDK backend is read back by nfdump's `nfcapd`
//! (skipped without it unless `REQUIRE_IPFIX_COLLECTORS` is set).
#![cfg(feature = "dpdk")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_config::RunConfig;
use cfdp_control::client::{Client, Target};
use pcap_file::pcap::PcapReader;
use serde_json::{json, Value};

// The IPFIX tests' collectors and read-back; this file uses nfcapd's part.
#[path = "ipfix/collectors.rs"]
#[allow(dead_code)]
mod collectors;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p)
}

use cfdp_testkit::dirs::test_dir as tmpdir;

fn frames(path: &Path) -> Vec<Vec<u8>> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut r = PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// A `cfdp run` configuration on net_pcap vdevs reading `input`, built
/// from the configuration's structs; `edit` sets what the test needs
/// beyond it (its control socket, its collectors).
fn dpdk_config(
    dir: &Path,
    name: &str,
    input: &Path,
    mode: &str,
    extra_rx: &str,
    edit: impl FnOnce(&mut RunConfig),
) -> PathBuf {
    let cfg = dir.join(format!("{name}.toml"));
    let out = |p: &str| dir.join(format!("dpdk.{p}pcap")).display().to_string();
    let mut c = RunConfig::default();
    c.dataplane.mode = mode.parse().expect("a mode");
    c.rules.file = repo("pcap/mixed.rules.json").display().to_string();
    let d = &mut c.dpdk;
    d.enabled = true;
    let prefix = format!("cfdp-test-{}-{name}", std::process::id());
    let rx = format!(
        "net_pcap0,rx_pcap={}{extra_rx},tx_pcap={}",
        input.display(),
        out("")
    );
    let (tx1, tx2) = (
        format!("net_pcap1,tx_pcap={}", out("port1.")),
        format!("net_pcap2,tx_pcap={}", out("port2.")),
    );
    d.eal_args = [
        "--no-huge",
        "--no-pci",
        "-m",
        "256",
        "--file-prefix",
        &prefix,
        "-l",
        "0",
        "--log-level",
        "*:warning",
        "--vdev",
        &rx,
        "--vdev",
        &tx1,
        "--vdev",
        &tx2,
    ]
    .map(String::from)
    .to_vec();
    d.rx_ports = vec!["net_pcap0".into()];
    d.tx_ports = ["net_pcap0", "net_pcap1", "net_pcap2"]
        .map(String::from)
        .to_vec();
    d.stop_when_idle_ms = if extra_rx.is_empty() { 300 } else { 0 };
    edit(&mut c);
    cfdp_testkit::node::write(&cfg, &c);
    cfg
}

fn cfdp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cfdp"))
}

fn last_json(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().expect("a summary line")).unwrap()
}

/// `cfdp replay` of mixed.pcap with its rules and `args`, which must
/// succeed: its report (stdout).
fn replay_mixed(args: &[&std::ffi::OsStr]) -> Value {
    let out = cfdp()
        .arg("replay")
        .arg(repo("pcap/mixed.pcap"))
        .arg("--rules")
        .arg(repo("pcap/mixed.rules.json"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `cfdp run --config cfg` to its end (the input replayed, then idle):
/// its final line, from the DPDK backend.
fn run_dpdk(cfg: &Path) -> Value {
    let out = cfdp().args(["run", "--config"]).arg(cfg).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = last_json(&out.stdout);
    assert_eq!(got["backend"], "dpdk");
    got
}

#[test]
fn net_pcap_replay_matches_the_pcap_backend() {
    for mode in ["verify", "filter-only"] {
        let dir = tmpdir(mode);
        // The pcap backend's answer.
        let out = dir.join("pcap.pcap");
        let os = std::ffi::OsStr::new;
        let want = replay_mixed(&[
            os("--workers"),
            os("1"),
            os("--mode"),
            os(mode),
            os("--out"),
            out.as_os_str(),
        ]);
        // The DPDK backend's answer.
        let cfg = dpdk_config(&dir, mode, &repo("pcap/mixed.pcap"), mode, "", |c| {
            c.control.socket = String::new();
        });
        let got = run_dpdk(&cfg);
        for k in [
            "packets",
            "bytes",
            "ipv4",
            "ipv6",
            "non_ip",
            "malformed",
            "fragments",
            "fragments_resolved",
            "matched",
            "dropped",
            "forwarded",
            "redirected",
            "counted",
            "allowed",
        ] {
            assert_eq!(got["totals"][k], want["totals"][k], "{mode}: {k}");
        }
        assert_eq!(got["malformed_by"], want["malformed_by"]);
        assert_eq!(got["rule_counters"], json!(want["rule_counters"]));
        for port in ["", "port1.", "port2."] {
            let a = frames(&dir.join(format!("pcap.{port}pcap")));
            let b = frames(&dir.join(format!("dpdk.{port}pcap")));
            assert_eq!(a, b, "{mode}: output {port} differs");
        }
        assert!(!frames(&dir.join("pcap.pcap")).is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn control_socket_works_with_the_dpdk_backend() {
    let dir = tmpdir("ctl");
    let socket = dir.join("ctl.sock");
    let cfg = dpdk_config(
        &dir,
        "ctl",
        &repo("pcap/mixed.pcap"),
        "verify",
        ",infinite_rx=1",
        |c| {
            c.control.socket = socket.display().to_string();
        },
    );
    let stderr = dir.join("stderr");
    let mut child = Running(Some(
        cfdp()
            .args(["run", "--config"])
            .arg(&cfg)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    ));
    cfdp_testkit::child::wait_for_socket(&socket, &stderr, child.0.as_mut().expect("running"));
    let mut c = Client::connect(&Target::Unix(&socket)).unwrap();
    // A count rule on every IPv4 source: most of mixed.pcap.
    let r = c
        .call(
            "apply",
            json!({"updates": [{"op": "insert", "rule": {"id": 100,
                "match": {"src_prefix": "0.0.0.0/0"}, "action": "count"}}]}),
        )
        .unwrap();
    assert_eq!(r["result"]["results"][0]["code"], "ok", "{r}");
    let t = Instant::now();
    loop {
        let g = c.call("get", json!({"id": 100})).unwrap();
        if g["result"]["packets"].as_u64() > Some(100) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "rule 100 never matched: {g}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = c.call("stats", json!({})).unwrap();
    assert!(
        s["result"]["totals"]["packets"].as_u64() > Some(1000),
        "{s}"
    );
    // The same statistics through DPDK's telemetry socket, as
    // dpdk-telemetry.py would ask for them.
    let tel = telemetry(&format!("cfdp-test-{}-ctl", std::process::id()));
    let st = tel("/cfdp/stats");
    let st = &st["/cfdp/stats"];
    assert_eq!(st["generation"], 1, "{st}");
    assert_eq!(st["rules"], 7, "{st}");
    assert!(st["totals_packets"].as_u64() > Some(1000), "{st}");
    assert!(st["memory_tables"].as_u64() > Some(0), "{st}");
    let w = tel("/cfdp/worker,0");
    assert!(w["/cfdp/worker"]["packets"].as_u64() > Some(1000), "{w}");
    let bad = tel("/cfdp/worker,7");
    assert_eq!(
        bad["/cfdp/worker"]["error"], "worker 7: there are 1 workers (0..0)",
        "{bad}"
    );
    drop(c);
    let out = child.stop();
    assert!(
        out.status.success(),
        "{}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    let fin = last_json(&out.stdout);
    assert_eq!(fin["final"], true);
    assert!(fin["dpdk"]["ports"][0][1]["ipackets"].as_u64() > Some(1000));
    std::fs::remove_dir_all(&dir).ok();
}

/// A `cfdp run` that is killed if the test fails before stopping it: its
/// `infinite_rx` port would otherwise keep writing the output capture until
/// the disk is full (a failed run once left 50 GB behind).
struct Running(Option<std::process::Child>);

impl Running {
    /// SIGTERM (a clean stop, final line printed) and its output.
    fn stop(mut self) -> std::process::Output {
        let child = self.0.take().expect("running");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A client of the DPDK telemetry socket of the process with EAL file
/// prefix `prefix`: sends a command, returns the parsed answer.
fn telemetry(prefix: &str) -> impl Fn(&str) -> Value {
    use rustix::net::{
        connect, recv, send, socket, AddressFamily, RecvFlags, SendFlags, SocketAddrUnix,
        SocketType,
    };
    let run_dir = if rustix::process::getuid().is_root() {
        PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"))
    };
    let path = run_dir.join("dpdk").join(prefix).join("dpdk_telemetry.v2");
    let fd = socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
    connect(&fd, &SocketAddrUnix::new(&path).unwrap())
        .unwrap_or_else(|e| panic!("telemetry socket {}: {e}", path.display()));
    let read = move |fd: &rustix::fd::OwnedFd| -> Value {
        let mut buf = vec![0u8; 1 << 16];
        let (n, _) = recv(fd, &mut buf[..], RecvFlags::empty()).unwrap();
        serde_json::from_slice(&buf[..n]).unwrap()
    };
    let hello = read(&fd);
    assert!(hello["max_output_len"].as_u64() > Some(0), "{hello}");
    move |cmd: &str| {
        send(&fd, cmd.as_bytes(), SendFlags::empty()).unwrap();
        read(&fd)
    }
}

/// `cfdp run` on DPDK exports every flow of a capture read by net_pcap:
/// the flows, packets and bytes `nfcapd` receives (read back by `nfdump`)
/// equal `cfdp replay --flows`' CSV of the same capture and rules, with
/// no sequence error, and the records carry Unix times (the DPDK clock
/// counts from the run's start: without its base the records were dated
/// 1970).
#[test]
fn dpdk_run_exports_every_flow_to_nfcapd() {
    if !collectors::collectors_installed(&["nfcapd", "nfdump"], "DPDK export") {
        return;
    }
    let dir = tmpdir("dpdk-ipfix");
    let capture = repo("pcap/mixed.pcap");
    let csv = dir.join("flows.csv");
    replay_mixed(&[std::ffi::OsStr::new("--flows"), csv.as_os_str()]);
    let want = collectors::flows_csv(&csv);
    assert!(!want.is_empty(), "no flows in the replay");
    let nfcapd = collectors::Nfcapd::start(&dir, "nfcapd");
    let cfg = dpdk_config(&dir, "ipfix", &capture, "verify", "", |c| {
        c.control.socket = String::new();
        c.ipfix.collectors = vec![format!("127.0.0.1:{}", nfcapd.port)];
    });
    let got = run_dpdk(&cfg);
    assert_eq!(got["export"]["send_errors"], 0, "{}", got["export"]);
    assert_eq!(got["export"]["queue_full"], 0, "{}", got["export"]);
    let store = nfcapd.store.clone();
    let summary = nfcapd.stop();
    assert!(summary.contains("Sequence Errors: 0"), "{summary}");
    let theirs = collectors::nfdump_flows(&store);
    collectors::same_flows("mixed.pcap on DPDK", "nfdump", &theirs, &want);
    let first = collectors::nfdump_first_times(&store);
    assert!(!first.is_empty());
    for t in &first {
        assert!(!t.starts_with("1970"), "a record dated {t}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
