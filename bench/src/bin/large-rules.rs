//! Large rule sets: how long `cfdp run` takes to be ready (rules enforced,
//! socket answering) with N exact-flow rules from a rule file and from its
//! own snapshot, what it then holds in memory (RSS, peak RSS, and the
//! store's own accounting by component), and how long `cfdp replay` takes
//! with the same file. One worker, pcap backend looping `pcap/mixed.pcap`
//! at 1000 frames/s, verify and filter-only mode.
//!
//! `cargo build --release -p cfdp -p cfdp-bench && ./target/release/large-rules`
//! (`--quick`: 0 and 100 k rules; `--sizes 0,1000000,...`; `--kind prefix`
//! for /32 prefix rules). Writes `results/large_rules.csv` (prefix rules:
//! `results/large_rules_prefix.csv`).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_bench::{
    arg, arg_u64_list, bench_flow, cfdp_binary, is_quick, machine_description, results_path,
    spawn_cfdp_run, write_csv,
};
use serde_json::Value;

/// A rule file of `n` drop rules, written as a stream: exact flows, or
/// (`prefix`) /32 destination prefixes, one prefix class.
fn rule_file(path: &Path, n: u64, prefix: bool) {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("create"));
    w.write_all(b"{\"rules\": [\n").unwrap();
    for i in 0..n {
        let k = bench_flow(i);
        let ip = |b: &[u8; 16]| format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        if prefix {
            writeln!(
                w,
                "{}{{\"id\": {}, \"match\": {{\"dst_prefix\": \"{}/32\"}}, \"action\": \"drop\"}}",
                if i == 0 { "" } else { "," },
                i + 1,
                ip(&k.src),
            )
            .unwrap();
            continue;
        }
        writeln!(
            w,
            "{}{{\"id\": {}, \"match\": {{\"flow\": {{\"src\": \"{}\", \"dst\": \"{}\", \
             \"proto\": \"udp\", \"sport\": {}, \"dport\": {}}}}}, \"action\": \"drop\"}}",
            if i == 0 { "" } else { "," },
            i + 1,
            ip(&k.src),
            ip(&k.dst),
            k.sport,
            k.dport
        )
        .unwrap();
    }
    w.write_all(b"]}\n").unwrap();
    // On disk before the first timed start: otherwise that start reads
    // while the kernel writes 1.4 GB of dirty pages back (measured: 11 s
    // instead of 6 for 10 M rules).
    w.into_inner().expect("flush").sync_all().expect("sync");
}

/// `VmRSS` and `VmHWM` of a process, bytes.
fn rss(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct Run {
    ready_s: f64,
    rss: u64,
    peak: u64,
    memory: Value,
}

/// Starts `cfdp run`, waits until `stats` answers, measures, stops it.
fn run(cfdp: &Path, dir: &Path, mode: &str, file: &Path, n: u64, state: bool) -> Run {
    let socket = dir.join("ctl.sock");
    let _ = std::fs::remove_file(&socket);
    let cfg = dir.join("cfdp.toml");
    let state_dir = if state {
        dir.join("state")
    } else {
        PathBuf::new()
    };
    cfdp_bench::write_node_config(&cfg, 1000, &socket, &state_dir, |c| {
        c.dataplane.mode = mode.parse().expect("a mode");
        c.rules.file = if n == 0 {
            String::new()
        } else {
            file.display().to_string()
        };
        c.control.max_rules = usize::try_from(n.max(1 << 20)).expect("a rule count");
    });
    let start = Instant::now();
    let mut child: Child = spawn_cfdp_run(cfdp, &cfg);
    let stats = loop {
        if let Ok(s) = UnixStream::connect(&socket) {
            let mut w = s.try_clone().expect("clone");
            w.write_all(b"{\"id\": 1, \"method\": \"stats\", \"params\": {}}\n")
                .expect("write");
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).expect("read");
            let v: Value = serde_json::from_str(&line).expect("JSON");
            break v["result"].clone();
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "cfdp run exited before it was ready"
        );
        assert!(start.elapsed() < Duration::from_secs(600), "not ready");
        std::thread::sleep(Duration::from_millis(5));
    };
    let ready_s = start.elapsed().as_secs_f64();
    assert_eq!(stats["rules"].as_u64(), Some(n), "rules installed: {stats}");
    let (rss, peak) = rss(child.id());
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    Run {
        ready_s,
        rss,
        peak,
        memory: stats["memory"].clone(),
    }
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--kind", "--sizes", "--cfdp"]);
    let quick = is_quick();
    let sizes: Vec<u64> = match arg_u64_list("--sizes") {
        Some(s) => s,
        None if quick => vec![0, 100_000],
        None => vec![0, 100_000, 1_000_000, 10_000_000],
    };
    let cfdp = cfdp_binary();
    // `--kind prefix`: /32 prefix rules instead of exact flows (results in
    // their own CSV).
    let prefix = arg("--kind").is_some_and(|k| k == "prefix");
    // A fresh scratch directory, removed when the run ends (also when it
    // panics).
    let base = tempfile::Builder::new()
        .prefix("cfdp-large-")
        .tempdir()
        .expect("a scratch directory");
    let base = base.path();
    println!("machine: {}", machine_description());
    let mut rows = Vec::new();
    let mut empty_rss = 0u64;
    for &n in &sizes {
        let file = base.join(format!("rules-{n}.json"));
        let t = Instant::now();
        rule_file(&file, n, prefix);
        let mb = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
        println!(
            "{n} rules: file {mb:.0} MB written in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        for mode in ["verify", "filter-only"] {
            if mode == "filter-only" && n > 1 << 23 {
                // Filter-only entries hold fingerprint + slot in 31 bits:
                // beyond 2^23 rules the fingerprint would drop below 8 bits,
                // which cfdp refuses (lower control.max_rules).
                println!("  filter-only: refused above 2^23 rules (fingerprint < 8 bits)");
                continue;
            }
            let dir = base.join(format!("{mode}-{n}"));
            std::fs::create_dir(&dir).expect("a state directory in the scratch directory");
            let from_file = run(&cfdp, &dir, mode, &file, n, false);
            // The first start with a state_dir saves a snapshot; the second
            // restores from it (rule file ignored).
            let _ = run(&cfdp, &dir, mode, &file, n, true);
            let from_snap = run(&cfdp, &dir, mode, &file, n, true);
            if n == 0 && mode == "verify" {
                empty_rss = from_file.rss;
            }
            for (source, r) in [("file", &from_file), ("snapshot", &from_snap)] {
                let per = |bytes: u64| {
                    if n == 0 {
                        0.0
                    } else {
                        bytes.saturating_sub(empty_rss) as f64 / n as f64
                    }
                };
                let m = &r.memory;
                println!(
                    "  {mode:11} from {source:8}: ready {:6.2} s, RSS {:7.1} MB ({:5.0} B/rule), \
                     peak {:7.1} MB ({:5.0} B/rule); accounted {:5.0} B/rule {m}",
                    r.ready_s,
                    r.rss as f64 / 1e6,
                    per(r.rss),
                    r.peak as f64 / 1e6,
                    per(r.peak),
                    m["bytes_per_rule"].as_f64().unwrap_or(0.0),
                );
                rows.push(format!(
                    "{n},{mode},{source},{:.3},{},{},{:.1},{:.1},{:.1},{},{},{},{},{}",
                    r.ready_s,
                    r.rss,
                    r.peak,
                    per(r.rss),
                    per(r.peak),
                    m["bytes_per_rule"].as_f64().unwrap_or(0.0),
                    m["rule_store"],
                    m["tables"],
                    m["filters"],
                    m["rule_counters"],
                    m["other"],
                ));
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        // `cfdp replay` with the same file (verify mode, one worker).
        let t = Instant::now();
        let st = Command::new(&cfdp)
            .args(["replay", "--workers", "1", "--rules"])
            .arg(&file)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcap/mixed.pcap"))
            .stdout(Stdio::null())
            .status()
            .expect("cfdp replay");
        assert!(st.success(), "cfdp replay failed");
        let s = t.elapsed().as_secs_f64();
        println!("  replay: {s:.2} s");
        rows.push(format!("{n},verify,replay,{s:.3},,,,,,,,,,"));
        let _ = std::fs::remove_file(&file);
    }
    let out = results_path(if prefix {
        "large_rules_prefix.csv"
    } else {
        "large_rules.csv"
    });
    write_csv(
        &out,
        "rules,mode,source,ready_s,rss_bytes,peak_rss_bytes,rss_per_rule,\
         peak_per_rule,accounted_per_rule,rule_store,tables,filters,rule_counters,other",
        &rows,
    )
    .expect("csv");
    println!("wrote {}", out.display());
}
