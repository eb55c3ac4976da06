//! Conformance against captures from public test suites with tshark's flow
//! truth (`F.flows.csv` beside each capture `F`; see the captures' README).
//!
//! `conformance DIR [--known FILE] [--write-known]`
//!
//! Replays every capture in DIR through the real pipeline (two workers, no
//! rules), compares the distinct outer 5-tuples and their packet counts with
//! the truth, and fails on any difference that is not listed, with its
//! reason, in the known-differences file (default
//! `dataplane/testkit/conformance/known-differences.tsv`). Listed differences that
//! no longer occur are reported too, so the file stays true.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cfdp_control::RuleStore;
use cfdp_engine::Mode;
use cfdp_pcap::{replay, ReplayOptions};

type Flows = BTreeMap<String, u64>;

/// Normalizes a 5-tuple the way the truth writes it: ports only for TCP
/// and UDP with a transport header in the frame (0/0 for later fragments).
fn key(src: &str, dst: &str, proto: &str, sport: &str, dport: &str) -> String {
    let ported = matches!(proto, "6" | "17") && !(sport == "0" && dport == "0");
    let (sp, dp) = if ported { (sport, dport) } else { ("", "") };
    format!("{src},{dst},{proto},{sp},{dp}")
}

/// A flow-truth file that cannot be read, with where and why.
#[derive(Debug)]
struct CsvError(String);

impl std::fmt::Display for CsvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn read_csv(path: &Path, count_col: usize) -> Result<Flows, CsvError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| CsvError(format!("{}: {e}", path.display())))?;
    let mut flows = Flows::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() <= count_col {
            return Err(CsvError(format!("{}:{}: short row", path.display(), n + 1)));
        }
        let packets: u64 = f[count_col]
            .parse()
            .map_err(|_| CsvError(format!("{}:{}: bad packet count", path.display(), n + 1)))?;
        *flows.entry(key(f[0], f[1], f[2], f[3], f[4])).or_default() += packets;
    }
    Ok(flows)
}

/// One difference: (file, flow, ours, truth).
type Diff = (String, String, String, String);

fn compare(file: &str, ours: &Flows, truth: &Flows) -> Vec<Diff> {
    let keys: BTreeSet<&String> = ours.keys().chain(truth.keys()).collect();
    let show = |v: Option<&u64>| v.map_or("-".to_string(), std::string::ToString::to_string);
    keys.into_iter()
        .filter(|k| ours.get(*k) != truth.get(*k))
        .map(|k| {
            (
                file.to_string(),
                k.clone(),
                show(ours.get(k)),
                show(truth.get(k)),
            )
        })
        .collect()
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        eprintln!("usage: conformance DIR [--known FILE] [--write-known]");
        return ExitCode::from(2);
    };
    let known_path = args
        .iter()
        .position(|a| a == "--known")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance/known-differences.tsv")
        });
    let write_known = args.iter().any(|a| a == "--write-known");

    let mut captures: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|e| e == "pcap" || e == "pcapng")
                    && p.with_file_name(format!(
                        "{}.flows.csv",
                        p.file_name().unwrap().to_string_lossy()
                    ))
                    .exists()
            })
            .collect(),
        Err(e) => {
            eprintln!("conformance: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    captures.sort();
    // The replay's flow CSV, rewritten for each capture (removed at exit).
    let tmp_dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("conformance: a temporary directory: {e}");
            return ExitCode::from(2);
        }
    };
    let tmp = tmp_dir.path().join("flows.csv");
    let mut diffs: Vec<Diff> = Vec::new();
    let mut failed_runs = 0;
    for cap in &captures {
        // A fresh data plane per capture: its counters are this capture's.
        let (_store, dp) = RuleStore::fixed(Vec::new(), Mode::Verify, 2).expect("empty rule set");
        let name = cap.file_name().unwrap().to_string_lossy().to_string();
        let opts = ReplayOptions {
            flows_csv: Some(tmp.clone()),
            ..ReplayOptions::new(cap.clone(), 2)
        };
        let report = match replay(&opts, &dp, &mut |_, _| {}) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{name}: replay failed: {e}");
                failed_runs += 1;
                continue;
            }
        };
        if let Some(e) = &report.capture_error {
            eprintln!("{name}: note: {e}");
        }
        let ours = read_csv(&tmp, 5);
        let truth = read_csv(&cap.with_file_name(format!("{name}.flows.csv")), 5);
        match (ours, truth) {
            (Ok(o), Ok(t)) => {
                let d = compare(&name, &o, &t);
                println!(
                    "{name}: {} packets, {} flows (truth {}), {} differing flows",
                    report.stats.totals.packets,
                    o.len(),
                    t.len(),
                    d.len()
                );
                diffs.extend(d);
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("{name}: {e}");
                failed_runs += 1;
            }
        }
    }
    drop(tmp_dir);

    // Known differences: file \t flow \t ours \t truth \t reason
    let known_text = std::fs::read_to_string(&known_path).unwrap_or_default();
    let mut known: BTreeMap<Diff, String> = BTreeMap::new();
    for line in known_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.splitn(5, '\t').collect();
        if f.len() == 5 {
            known.insert(
                (f[0].into(), f[1].into(), f[2].into(), f[3].into()),
                f[4].into(),
            );
        } else {
            eprintln!("{}: malformed line: {line}", known_path.display());
            failed_runs += 1;
        }
    }
    if write_known {
        let mut out =
            String::from("# file\tflow (src,dst,proto,sport,dport)\tours\ttruth\treason\n");
        for d in &diffs {
            let reason = known
                .get(d)
                .cloned()
                .unwrap_or_else(|| "UNEXPLAINED".into());
            out.push_str(&format!("{}\t{}\t{}\t{}\t{reason}\n", d.0, d.1, d.2, d.3));
        }
        if let Err(e) = std::fs::write(&known_path, out) {
            eprintln!("{}: {e}", known_path.display());
            return ExitCode::from(2);
        }
    }
    let unexplained: Vec<&Diff> = diffs
        .iter()
        .filter(|d| known.get(*d).is_none_or(|r| r == "UNEXPLAINED"))
        .collect();
    let current: BTreeSet<&Diff> = diffs.iter().collect();
    let stale: Vec<&Diff> = known.keys().filter(|k| !current.contains(k)).collect();
    for d in &unexplained {
        println!("UNEXPLAINED {}\t{}\tours {}\ttruth {}", d.0, d.1, d.2, d.3);
    }
    for d in &stale {
        println!("STALE (listed, no longer differs) {}\t{}", d.0, d.1);
    }
    println!(
        "conformance: {} captures, {} differing flows ({} explained), {} unexplained, {} stale, {} failed runs",
        captures.len(),
        diffs.len(),
        diffs.len() - unexplained.len(),
        unexplained.len(),
        stale.len(),
        failed_runs
    );
    if unexplained.is_empty() && stale.is_empty() && failed_runs == 0 && !captures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
