//! `cfdp`: the data plane's command line.
//!
//! * `cfdp replay IN [--rules FILE] [--out OUT.pcap] [--workers N]
//!   [--flows FILE.csv] [--mode verify|filter-only]` replays a capture
//!   through the workers and prints one JSON summary on stdout.
//! * `cfdp run [--config FILE]` runs from TOML configuration (embedded
//!   default: `configs/default.toml`) until SIGINT/SIGTERM, serving the
//!   control socket.
//! * `cfdp ctl [--socket PATH | --tcp ADDR] COMMAND` talks to a running
//!   `cfdp run` (see `rules/PROTOCOL.md`).

use std::path::PathBuf;
use std::process::ExitCode;

use cfdp_dataplane::control::client::{self, Target};
use cfdp_dataplane::matcher::Mode;
use cfdp_dataplane::replay::{replay, Dataplane, ReplayOptions};
use clap::{Parser, Subcommand};
use serde_json::json;

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
    /// Talk to a running `cfdp run` over its control socket; prints the
    /// JSON response, exits 1 when the server reports an error.
    Ctl {
        /// Unix socket (default: control.socket of the embedded
        /// configuration, after CFDP_CONTROL__SOCKET).
        #[arg(long, conflicts_with = "tcp")]
        socket: Option<PathBuf>,
        /// TCP address of a server with control.tcp set.
        #[arg(long)]
        tcp: Option<String>,
        #[command(subcommand)]
        cmd: CtlCmd,
    },
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Apply a batch from FILE (`-`: stdin): {"updates": [...], "atomicity": ...}.
    Apply {
        file: PathBuf,
        /// Override the batch's atomicity.
        #[arg(long, value_parser = ["continue_on_error", "rollback_on_error", "dataplane_atomic"])]
        atomicity: Option<String>,
        /// Fail unless the rule set is at this generation.
        #[arg(long)]
        expected_generation: Option<u64>,
    },
    /// List the rules with their counters.
    Rules {
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// One rule with its counters.
    Get {
        id: u32,
    },
    /// Counters, filter occupancy, latencies.
    Stats,
    /// Move Bloom-part elements back into cuckoo entries now.
    Migrate {
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Write a snapshot and compact the journal now.
    Snapshot,
    Ping,
    /// API version and capabilities.
    Hello,
}

fn ctl(socket: Option<PathBuf>, tcp: Option<String>, cmd: CtlCmd) -> ExitCode {
    let (method, params) = match cmd {
        CtlCmd::Apply {
            file,
            atomicity,
            expected_generation,
        } => {
            let mut batch = match client::read_batch(&file) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("cfdp ctl: {e}");
                    return ExitCode::from(2);
                }
            };
            if !batch.is_object() {
                eprintln!("cfdp ctl: {}: a batch is a JSON object", file.display());
                return ExitCode::from(2);
            }
            if let Some(a) = atomicity {
                batch["atomicity"] = a.into();
            }
            if let Some(g) = expected_generation {
                batch["expected_generation"] = g.into();
            }
            ("apply", batch)
        }
        CtlCmd::Rules { offset, limit } => ("rules", json!({"offset": offset, "limit": limit})),
        CtlCmd::Get { id } => ("get", json!({ "id": id })),
        CtlCmd::Stats => ("stats", json!({})),
        CtlCmd::Migrate { budget } => (
            "migrate",
            budget.map_or_else(|| json!({}), |b| json!({ "budget": b })),
        ),
        CtlCmd::Snapshot => ("snapshot", json!({})),
        CtlCmd::Ping => ("ping", json!({})),
        CtlCmd::Hello => ("hello", json!({})),
    };
    let socket = match (socket, &tcp) {
        (Some(s), _) => Some(s),
        (None, Some(_)) => None,
        (None, None) => match cfdp_dataplane::run::load_config(None) {
            Ok(c) if !c.control.socket.is_empty() => Some(PathBuf::from(c.control.socket)),
            Ok(_) => {
                eprintln!(
                    "cfdp ctl: the default configuration has no control.socket: use --socket"
                );
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("cfdp ctl: config: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let target = match (&socket, &tcp) {
        (Some(p), _) => Target::Unix(p),
        (None, Some(a)) => Target::Tcp(a),
        (None, None) => unreachable!("one target is always set"),
    };
    ExitCode::from(client::run(&target, method, params))
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
        Cmd::Ctl { socket, tcp, cmd } => ctl(socket, tcp, cmd),
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
                    Ok(s) => s.rules().to_vec(),
                    Err(e) => {
                        eprintln!("cfdp: {}: {e}", path.display());
                        return ExitCode::from(2);
                    }
                },
                None => Vec::new(),
            };
            let workers = workers.unwrap_or_else(default_workers);
            if workers > cfdp_dataplane::replay::MAX_WORKERS {
                eprintln!(
                    "cfdp: workers = {workers}: at most {} are supported",
                    cfdp_dataplane::replay::MAX_WORKERS
                );
                return ExitCode::from(2);
            }
            let (_store, dp) = match Dataplane::fixed(&set, mode, workers) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("cfdp: rules: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = ReplayOptions {
                input: input.clone(),
                out,
                workers,
                flows_csv: flows,
                progress: true,
                stop: None,
                repeat: false,
                drop_when_full: false,
                pps: 0,
            };
            match replay(&opts, &dp, &mut |_, _| {}) {
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
