//! `cfdp replay`: a capture through a fixed rule set, one JSON summary on
//! stdout (the data plane's statistics snapshot plus the replay's own
//! figures).

use std::path::PathBuf;
use std::process::ExitCode;

use cfdp_control::RuleStore;
use cfdp_engine::Mode;
use cfdp_pcap::{ReplayError, ReplayOptions, MAX_WORKERS};

pub struct Args {
    pub input: PathBuf,
    pub rules: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub workers: usize,
    pub flows: Option<PathBuf>,
    pub mode: Mode,
    /// Trace this frame (1-based) instead of replaying the capture.
    pub trace: Option<u64>,
}

/// The rule file's rules (none without one).
fn read_rules(path: Option<&std::path::Path>) -> Result<Vec<cfdp_rules::Rule>, ExitCode> {
    match path {
        Some(path) => cfdp_rules::read_rule_file(path).map_err(|e| {
            eprintln!("cfdp: {}: {e}", path.display());
            ExitCode::from(2)
        }),
        None => Ok(Vec::new()),
    }
}

pub fn replay(a: Args) -> ExitCode {
    let t = std::time::Instant::now();
    let rules = match read_rules(a.rules.as_deref()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if a.workers > MAX_WORKERS {
        eprintln!(
            "cfdp: workers = {}: at most {MAX_WORKERS} are supported",
            a.workers
        );
        return ExitCode::from(2);
    }
    let parsed = t.elapsed();
    // The store refuses duplicate ids and matches, naming the rule.
    let n = rules.len();
    let (store, cx) = match RuleStore::fixed(rules, a.mode, a.workers) {
        Ok(x) => {
            if let Some(path) = &a.rules {
                eprintln!(
                    "cfdp: {} rules from {}: read in {:.2} s, installed in {:.2} s",
                    n,
                    path.display(),
                    parsed.as_secs_f64(),
                    (t.elapsed() - parsed).as_secs_f64()
                );
            }
            x
        }
        Err(e) => {
            let file = a.rules.as_ref().map(|p| p.display().to_string());
            eprintln!("cfdp: {}: {e}", file.as_deref().unwrap_or("rules"));
            return ExitCode::from(2);
        }
    };
    if let Some(n) = a.trace {
        return crate::trace_cmd::trace_frame(&a.input, n, &store);
    }
    let opts = ReplayOptions {
        input: a.input.clone(),
        out: a.out,
        workers: a.workers,
        flows_csv: a.flows,
        progress: true,
        stop: None,
        repeat: false,
        drop_when_full: false,
        pps: 0,
    };
    match cfdp_pcap::replay(&opts, &cx, &mut |_, _| {}) {
        Ok(mut report) => {
            report.rule_counters = store.count_rule_counters();
            if let Some(e) = &report.capture_error {
                eprintln!(
                    "cfdp: {}: {e} (summary covers what was read)",
                    a.input.display()
                );
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&report).expect("report serializes")
            );
            if report.capture_error.is_some() {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e @ ReplayError::Config(_)) => {
            eprintln!("cfdp: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("cfdp: {}: {e}", a.input.display());
            ExitCode::from(1)
        }
    }
}
