//! The `cfdp` binary itself: JSON on stdout, clear errors and exit codes.

use std::process::Command;

fn cfdp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cfdp"))
}

fn repo(p: &str) -> String {
    format!("{}/../../{p}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn replay_prints_the_summary_keys() {
    let out = cfdp()
        .args([
            "replay",
            &repo("pcap/mixed.pcap"),
            "--rules",
            &repo("pcap/mixed.rules.json"),
            "--workers",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "packets",
        "bytes",
        "ipv4",
        "ipv6",
        "non_ip",
        "malformed",
        "fragments",
        "matched",
        "dropped",
        "forwarded",
    ] {
        assert!(v["totals"].get(k).is_some(), "missing totals.{k} in {v}");
    }
    for k in [
        "flows",
        "elapsed_s",
        "mpps",
        "actions",
        "malformed_by",
        "workers",
        "burst_ns",
    ] {
        assert!(v.get(k).is_some(), "missing {k} in {v}");
    }
    assert_eq!(v["totals"]["packets"], 28);
    assert_eq!(v["totals"]["dropped"], 10);
    // Flow accounting is on only with --flows.
    assert_eq!(v["flows"], serde_json::Value::Null);
    assert_eq!(v["actions"]["redirect"], 2);
    assert_eq!(v["non_ip_by"]["arp"], 1);
    assert_eq!(v["malformed_by"]["ip_truncated"], 1);
}

#[test]
fn bad_rule_file_names_rule_and_field() {
    let dir = cfdp_testkit::dirs::test_dir("cli");
    let rules = dir.join("bad.json");
    std::fs::write(
        &rules,
        r#"{"rules": [{"id": 9, "match": {"dst_prefix": "10.0.0.0/40"}, "action": "drop"}]}"#,
    )
    .unwrap();
    let out = cfdp()
        .args([
            "replay",
            &repo("pcap/mixed.pcap"),
            "--rules",
            rules.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rule #1 (id 9): match.dst_prefix: prefix length"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_capture_is_an_error() {
    let out = cfdp()
        .args(["replay", "/nonexistent.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open capture"));
}

#[test]
fn run_loops_until_sigterm_and_stops_cleanly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = cfdp_testkit::dirs::test_dir("cli-loop");
    let mut child = cfdp()
        .args(["run"])
        .current_dir(repo(""))
        .env("CFDP_PCAP__LOOP", "true")
        .env("CFDP_DATAPLANE__WORKERS", "2")
        .env("CFDP_CONTROL__SOCKET", dir.join("ctl.sock"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Two pass lines prove it loops (at most one line per 100 ms is
    // printed, so pass numbers grow but may skip).
    let mut last = 0;
    for _ in 0..2 {
        let line = lines.next().expect("a pass line").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let pass = v["pass"].as_u64().unwrap();
        assert!(pass > last, "{line}");
        last = pass;
        assert_eq!(v["packets"], 28);
        assert_eq!(v["workers"], 2);
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for _ in lines {} // drain until the process closes stdout
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped after"));
}

#[test]
fn run_refuses_a_bad_config() {
    let dir = cfdp_testkit::dirs::test_dir("cfg");
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "[dataplane]\nworkers = \"many\"\n").unwrap();
    let out = cfdp()
        .args(["run", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("workers"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn absurd_worker_count_is_a_clear_error() {
    let out = cfdp()
        .args(["replay", &repo("pcap/mixed.pcap"), "--workers", "1000000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 1024"));
}

/// Every shipped configuration parses (unknown keys are refused, so a
/// renamed setting breaks this test rather than a user's start-up).
#[test]
fn every_shipped_configuration_parses() {
    let mut n = 0;
    for e in std::fs::read_dir(repo("configs")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        let out = cfdp()
            .args(["run", "--print-config", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        n += 1;
    }
    assert!(n >= 6, "only {n} configurations found");
}

/// Asking for a fleet from a build without etcd is a configuration error
/// (exit 2) that says how to build one.
#[test]
fn cluster_mode_without_etcd_support_is_refused_clearly() {
    if cfg!(feature = "etcd") {
        return;
    }
    let out = cfdp()
        .args(["run", "--config", &repo("configs/cluster-node.toml")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features etcd"), "{err}");
}

/// `cfdp replay --trace N` on the generated capture: a later fragment takes
/// its first fragment's ports and gets the port rule that drops the
/// datagram; a non-IP frame says so; a frame past the end is refused.
#[test]
fn replay_trace_explains_one_frame_with_its_fragment_state() {
    let frames = cfdp_testkit::captures::mixed();
    // The last IPv6 fragment of the udp/5353 datagram (rule 6 drops it).
    let later = frames
        .iter()
        .rposition(|f| f.note == "IPv6 fragment of udp/5353 (rule 6)")
        .unwrap()
        + 1;
    let arp = frames.iter().position(|f| f.note.contains("ARP")).unwrap() + 1;
    let trace = |n: usize| {
        let out = cfdp()
            .args(["replay", &repo("pcap/mixed.pcap"), "--rules"])
            .arg(repo("pcap/mixed.rules.json"))
            .args(["--trace", &n.to_string()])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = trace(later);
    assert_eq!(code, Some(0), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["fragment"]
            .as_str()
            .unwrap()
            .contains("ports 5353 -> 5353 from its first fragment"),
        "{v}"
    );
    assert_eq!(v["trace"]["rule"]["id"], 6, "{v}");
    assert_eq!(v["trace"]["consistent"], true, "{v}");
    let (code, out) = trace(arp);
    assert_eq!(code, Some(0), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "arp", "{v}");
    let (code, _) = trace(frames.len() + 1);
    assert_eq!(code, Some(2));
}

/// `cfdp replay` with stateful rules takes its table's timeouts from
/// `--config`'s `[conntrack]`: the generated conversations' answer that
/// comes 100 s later passes with Linux's 120 s for a replied UDP
/// conversation, and is dropped with 50 s; a bad value exits 2 naming it.
#[test]
fn replay_takes_conntrack_timeouts_from_its_config() {
    use cfdp_testkit::{captures, stateful};
    let dir = cfdp_testkit::dirs::test_dir("replay-conntrack");
    let capture = dir.join("stateful.pcap");
    captures::write_pcap(&capture, &stateful::stateful_conversations()).unwrap();
    let rules = dir.join("rules.json");
    std::fs::write(&rules, stateful::STATEFUL_RULES).unwrap();
    // With a configuration: the defaults, then `edit`'s changes.
    let replay = |edit: Option<fn(&mut cfdp_config::RunConfig)>| {
        let mut c = cfdp();
        c.args(["replay", "--workers", "1", "--rules"])
            .arg(&rules)
            .arg(&capture);
        if let Some(edit) = edit {
            let mut cfg = cfdp_config::RunConfig::default();
            edit(&mut cfg);
            let path = dir.join("cfdp.toml");
            cfdp_testkit::node::write(&path, &cfg);
            c.arg("--config").arg(path);
        }
        c.output().unwrap()
    };
    let forwarded = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["totals"]["forwarded"].as_u64().unwrap(),
            v["totals"]["ct_opened"].as_u64().unwrap(),
        )
    };
    let (linux, opened) = forwarded(&replay(None));
    assert_eq!(opened, stateful::STATEFUL_OPENED);
    let short = forwarded(&replay(Some(|c| c.conntrack.timeouts.udp_replied_s = 50))).0;
    assert_eq!(short, linux - 1);
    let bad = replay(Some(|c| c.conntrack.capacity = 0));
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("conntrack") && err.contains("capacity"),
        "{err}"
    );
}
