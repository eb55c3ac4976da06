//! `cfdp`: the data plane's command line.
//!
//! * `cfdp replay IN [--rules FILE] [--out OUT.pcap] [--workers N]
//!   [--flows FILE.csv] [--mode verify|filter-only]` replays a capture
//!   through the workers and prints one JSON summary on stdout.
//! * `cfdp run [--config FILE]` runs from TOML configuration (embedded
//!   default: `configs/default.toml`) until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cfdp_dataplane::matcher::{Matcher, Mode};
use cfdp_dataplane::replay::{replay, ReplayOptions};
use cfdp_rules::RuleSet;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cfdp",
    version,
    about = "Packet data plane on a concurrent Bloom-Cuckoo filter"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay a pcap/pcapng capture through the rules; print a JSON summary.
    Replay {
        /// Capture to replay (pcap or pcapng).
        input: PathBuf,
        /// Rule file (JSON); without it every packet is forwarded.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Write forwarded packets here (redirects go to OUT.portN.pcap).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Worker threads (default: cores − 1, at least 1).
        #[arg(long)]
        workers: Option<usize>,
        /// Write exact per-flow counters as CSV.
        #[arg(long)]
        flows: Option<PathBuf>,
        /// verify: confirm filter positives against the exact rule tables;
        /// filter-only: take the action from the filter (false positives possible).
        #[arg(long, default_value = "verify")]
        mode: Mode,
    },
    /// Run the data plane from a TOML configuration until SIGINT/SIGTERM
    /// (default: the embedded configs/default.toml).
    Run {
        /// Configuration file, layered over the embedded default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the effective configuration and exit.
        #[arg(long)]
        print_config: bool,
    },
}

fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .max(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            config,
            print_config,
        } => {
            let cfg = match cfdp_dataplane::run::load_config(config.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("cfdp: config: {e}");
                    return ExitCode::from(2);
                }
            };
            if print_config {
                println!("{cfg:#?}");
                return ExitCode::SUCCESS;
            }
            match cfdp_dataplane::run::run(cfg, default_workers()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cfdp: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Replay {
            input,
            rules,
            out,
            workers,
            flows,
            mode,
        } => {
            let set = match rules {
                Some(path) => match cfdp_rules::load_rule_file(&path) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("cfdp: {}: {e}", path.display());
                        return ExitCode::from(2);
                    }
                },
                None => RuleSet::default(),
            };
            let matcher = match Matcher::new(set, mode) {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    eprintln!("cfdp: rules: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = ReplayOptions {
                input: input.clone(),
                out,
                workers: workers.unwrap_or_else(default_workers),
                flows_csv: flows,
                progress: true,
                stop: None,
            };
            match replay(&opts, matcher) {
                Ok(report) => {
                    if let Some(e) = &report.capture_error {
                        eprintln!(
                            "cfdp: {}: {e} (summary covers what was read)",
                            input.display()
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
                Err(e @ cfdp_dataplane::replay::ReplayError::Config(_)) => {
                    eprintln!("cfdp: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("cfdp: {}: {e}", input.display());
                    ExitCode::from(1)
                }
            }
        }
    }
}
