//! `cfdp replay`: a capture through a fixed rule set, one JSON summary on
//! stdout (the data plane's statistics snapshot plus the replay's own
//! figures).

use std::path::PathBuf;
use std::process::ExitCode;

use cfdp_control::RuleStore;
use cfdp_engine::Mode;
use cfdp_pcap::{ReplayError, ReplayOptions, MAX_WORKERS};

#[derive(clap::Args)]
pub struct Args {
    /// Capture to replay (pcap or pcapng).
    pub input: PathBuf,
    /// Rule file (JSON); without it every packet is forwarded.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Write forwarded packets here (redirects go to OUT.portN.pcap).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Worker threads (default: cores − 1, at least 1).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Write exact per-flow counters as CSV.
    #[arg(long)]
    pub flows: Option<PathBuf>,
    /// Export every flow as IPFIX (UDP) to this collector, with the
    /// capture's timestamps (repeat for more collectors), e.g. nfdump's
    /// `nfcapd -p 4739`.
    #[arg(long, value_name = "HOST:PORT")]
    pub ipfix: Vec<String>,
    /// Export 1 in N of the frames each worker receives (systematic
    /// count-based sampling: the first and every Nth after it; stated to
    /// the collectors in an options template, which scale the counts by
    /// N). 1: every frame.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(cfdp_export::settings::MAX_SAMPLING)))]
    pub ipfix_sampling: u32,
    /// Export both directions of each tracked connection (stateful rules)
    /// as one biflow record (RFC 5103 reverse elements: nfdump reads them
    /// as its out packets and bytes; pmacct 1.7 counts the forward half
    /// only). Flows no connection tracks stay one record a direction.
    #[arg(long)]
    pub ipfix_biflow: bool,
    /// Name the rule that decided each record's first packet, as element
    /// 1 of this private enterprise number (unsigned32; no IANA element
    /// names a rule; 0: not named). pmacct reads it as a custom primitive
    /// (`field_type=PEN:1`).
    #[arg(long, value_name = "PEN", default_value_t = 0)]
    pub ipfix_rule_pen: u32,
    /// verify: confirm filter positives against the exact rule tables;
    /// filter-only: take the action from the filter (false positives possible).
    #[arg(long, default_value = "verify")]
    pub mode: Mode,
    /// Trace frame N (1-based) instead: its decoding, fragment state,
    /// the rule it gets and every rule it matches (JSON).
    #[arg(long, value_name = "N")]
    pub trace: Option<u64>,
    /// A configuration file whose `[conntrack]` section (table size,
    /// timeouts) the replay's stateful rules use; the other sections
    /// are checked and not used.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The collectors' addresses, each resolved (the first address a name
/// has); a clear error (exit code 2) for one that does not resolve.
fn collectors(given: &[String]) -> Result<Vec<std::net::SocketAddr>, ExitCode> {
    given
        .iter()
        .map(|c| cfdp_export::settings::collector(c))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            eprintln!("cfdp: --ipfix {e}");
            ExitCode::from(2)
        })
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

/// The connection table for `rules` when one of them is stateful, from
/// `config`'s `[conntrack]` (the embedded default's without one).
fn conntrack_for(
    rules: &[cfdp_rules::Rule],
    config: Option<&std::path::Path>,
) -> Result<Option<std::sync::Arc<cfdp_conntrack::ConnTable>>, ExitCode> {
    if !rules.iter().any(|r| r.action.tracked().is_some()) {
        return Ok(None);
    }
    crate::load::load_config(config)
        .and_then(|cfg| crate::run::conntrack_table(&cfg.conntrack))
        .map(Some)
        .map_err(|e| {
            eprintln!("cfdp: {}", crate::error::chain(&e));
            ExitCode::from(2)
        })
}

/// The replay's options from its flags: outputs, and the flow export's
/// collectors (each resolved: exit code 2 for one that does not),
/// sampling and biflow records.
fn options(a: &Args, workers: usize) -> Result<ReplayOptions, ExitCode> {
    Ok(ReplayOptions {
        out: a.out.clone(),
        flows_csv: a.flows.clone(),
        progress: true,
        ipfix: collectors(&a.ipfix)?,
        ipfix_sampling: a.ipfix_sampling,
        ipfix_rule_pen: a.ipfix_rule_pen,
        ipfix_cache: cfdp_export::CacheSettings {
            biflow: a.ipfix_biflow,
            ..cfdp_export::CacheSettings::default()
        },
        ..ReplayOptions::new(a.input.clone(), workers)
    })
}

pub fn replay(a: Args) -> ExitCode {
    let t = std::time::Instant::now();
    let rules = match read_rules(a.rules.as_deref()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let workers = a.workers.unwrap_or_else(crate::default_workers);
    if workers > MAX_WORKERS {
        eprintln!("cfdp: workers = {workers}: at most {MAX_WORKERS} are supported");
        return ExitCode::from(2);
    }
    let parsed = t.elapsed();
    // The store refuses duplicate ids and matches, naming the rule.
    let n = rules.len();
    // Stateful rules track connections (no table without any).
    let conntrack = match conntrack_for(&rules, a.config.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let (store, cx) = match RuleStore::fixed_tracked(rules, a.mode, workers, conntrack) {
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
    let opts = match options(&a, workers) {
        Ok(o) => o,
        Err(code) => return code,
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
