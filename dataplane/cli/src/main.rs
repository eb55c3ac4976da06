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

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod ctl;
mod descriptors;
mod error;
mod import_cmd;
mod load;
mod replay_cmd;
mod run;
#[cfg(feature = "dpdk")]
mod telemetry;
mod top;
mod trace_cmd;

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
    Replay(replay_cmd::Args),
    /// Run the data plane from a TOML configuration until SIGINT/SIGTERM
    /// (default: the embedded configs/default.toml).
    Run {
        /// Configuration file, layered over the embedded default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the effective configuration and exit.
        #[arg(long)]
        print_config: bool,
        /// Testing only: each batch waits, before it is applied, until
        /// DIR/release exists (DIR/held says one waits).
        #[arg(long, hide = true, value_name = "DIR")]
        hold_batches: Option<PathBuf>,
    },
    /// Rule files: `import --format classbench IN [-o OUT]` turns a
    /// ClassBench filter set into a cfdp rule file.
    Rules {
        #[command(subcommand)]
        cmd: RulesCmd,
    },
    /// Print cfdp's pipeline as a P4Info in protobuf text format (what a
    /// P4Runtime controller is given; configs/p4/cfdp.p4info.txtpb).
    P4info,
    /// A live terminal view of a running `cfdp run` over its control
    /// socket: per-worker packets/s and drops, the busiest rules, batch
    /// latency, generation, journal and filter occupancy. `q` quits.
    Top {
        #[command(flatten)]
        place: PlaceArgs,
        /// Refresh interval, milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
    /// Talk to a running `cfdp run` over its control socket; prints the
    /// JSON response, exits 1 when the server reports an error.
    Ctl {
        #[command(flatten)]
        place: PlaceArgs,
        /// The fleet's etcd instead of one node: endpoints
        /// (`http://host:2379`, comma-separated). With it: apply, rules,
        /// get, fleet, wait (a build with `--features etcd`).
        #[arg(long, value_delimiter = ',', conflicts_with_all = ["socket", "tcp"])]
        etcd: Vec<String>,
        /// The fleet's key prefix in etcd (`[cluster] prefix`).
        #[arg(long, default_value = "/cfdp/default")]
        prefix: String,
        /// etcd's --max-txn-ops (a batch that needs more is refused).
        #[arg(long, default_value_t = 128)]
        max_txn_ops: usize,
        /// etcd's --max-request-bytes.
        #[arg(long, default_value_t = 1536 * 1024)]
        max_request_bytes: usize,
        #[command(flatten)]
        etcd_security: Box<EtcdSecurityArgs>,
        #[command(subcommand)]
        cmd: CtlCmd,
    },
}

/// Where a running node is reached (`cfdp ctl`, `cfdp top`).
#[derive(clap::Args)]
struct PlaceArgs {
    /// Unix socket (default: control.socket of the embedded
    /// configuration, after CFDP_CONTROL__SOCKET).
    #[arg(long, conflicts_with = "tcp")]
    socket: Option<PathBuf>,
    /// TCP address of a server with control.tcp set.
    #[arg(long)]
    tcp: Option<String>,
    /// With --tcp: the server's token file (default: control.token_file
    /// of the embedded configuration, after CFDP_CONTROL__TOKEN_FILE).
    #[arg(long, requires = "tcp")]
    token_file: Option<PathBuf>,
}

/// TLS and authentication towards etcd (`cfdp_cluster::security`), the
/// same settings as a node's `[cluster]` section.
#[derive(clap::Args)]
struct EtcdSecurityArgs {
    /// CA certificate (PEM) etcd's server certificate must chain to
    /// (endpoints are then https://).
    #[arg(long, requires = "etcd")]
    etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) for etcd's --client-cert-auth.
    #[arg(long, requires_all = ["etcd", "etcd_key"])]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, requires_all = ["etcd", "etcd_cert"])]
    etcd_key: Option<PathBuf>,
    /// etcd user (etcd's authentication on).
    #[arg(long, requires_all = ["etcd", "etcd_password_file"])]
    etcd_user: Option<String>,
    /// File holding the user's password (not readable by others).
    #[arg(long, requires_all = ["etcd", "etcd_user"])]
    etcd_password_file: Option<PathBuf>,
}

impl EtcdSecurityArgs {
    fn security(self) -> cfdp_cluster::EtcdSecurity {
        cfdp_cluster::EtcdSecurity {
            ca_file: self.etcd_ca,
            cert_file: self.etcd_cert,
            key_file: self.etcd_key,
            user: self.etcd_user,
            password_file: self.etcd_password_file,
        }
    }
}

#[derive(Subcommand)]
enum RulesCmd {
    /// Converts a rule set of another format into a cfdp rule file.
    Import {
        /// The input's format.
        #[arg(long, value_enum)]
        format: import_cmd::Format,
        input: PathBuf,
        /// Output rule file (default: standard output).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The action every imported rule takes.
        #[arg(long, default_value = "drop")]
        action: cfdp_rules::Action,
    },
}

#[derive(Subcommand)]
pub(crate) enum CtlCmd {
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
    /// Replace the whole rule set by the rules in FILE (a rule file, `-`:
    /// stdin): only the difference is applied, as one atomic batch.
    Replace {
        file: PathBuf,
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
    /// Tracked connections of stateful rules: state, idle time, the rule
    /// that opened them; age, packets and bytes each way with `[conntrack]
    /// accounting`.
    Conns {
        /// Opened from this prefix or address.
        #[arg(long)]
        src: Option<String>,
        /// Opened towards this prefix or address.
        #[arg(long)]
        dst: Option<String>,
        /// tcp, udp, icmp, icmpv6 or a number.
        #[arg(long)]
        proto: Option<String>,
        /// Either port (an ICMP query's identifier).
        #[arg(long)]
        port: Option<u16>,
        /// At most this many (1 to 10000).
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
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
    /// Which rule a 5-tuple gets from the running data plane's tables,
    /// every other rule it matches, and the tables asked on the way.
    Trace {
        #[arg(long, required_unless_present = "pcap")]
        src: Option<String>,
        #[arg(long, required_unless_present = "pcap")]
        dst: Option<String>,
        /// tcp, udp, icmp, icmpv6 or a number.
        #[arg(long, required_unless_present = "pcap")]
        proto: Option<String>,
        /// With tcp or udp (default 0).
        #[arg(long)]
        sport: Option<u16>,
        #[arg(long)]
        dport: Option<u16>,
        /// Readable text instead of JSON.
        #[arg(long)]
        text: bool,
        /// Instead of a 5-tuple: frame N (1-based) of this capture, read
        /// here as a worker would (later fragments take their first
        /// fragment's ports), its 5-tuple asked of the node.
        #[arg(long, requires = "frame", conflicts_with_all = ["src", "dst", "proto", "sport", "dport"])]
        pcap: Option<PathBuf>,
        #[arg(long, requires = "pcap")]
        frame: Option<u64>,
    },
    /// (--etcd) The fleet: its generation, every node with its applied
    /// generation, liveness, last error and packet counters.
    Fleet,
    /// (--etcd) Wait until every live node has applied generation ≥ G;
    /// exits 1 on time-out, naming the nodes that lag.
    Wait {
        generation: i64,
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
    },
}

fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get().saturating_sub(1))
        .unwrap_or(1)
        .max(1)
}

/// `cfdp run`: exit 2 for a bad configuration, 1 for a runtime error.
fn run_cmd(
    config: Option<&std::path::Path>,
    print_config: bool,
    hooks: run::TestHooks,
) -> ExitCode {
    let cfg = match load::load_config(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cfdp: config: {}", error::chain(&e));
            return ExitCode::from(2);
        }
    };
    if print_config {
        println!("{cfg:#?}");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = run::check(&cfg) {
        eprintln!("cfdp: config: {}", error::chain(&e));
        return ExitCode::from(2);
    }
    match run::run(cfg, default_workers(), hooks) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cfdp: {}", error::chain(&e));
            ExitCode::from(1)
        }
    }
}

/// `cfdp p4info`.
fn p4info_cmd() -> ExitCode {
    let p4info = cfdp_p4runtime::pipeline::p4info();
    print!("{}", cfdp_p4runtime::text::to_text(&p4info));
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Ctl {
            place:
                PlaceArgs {
                    socket,
                    tcp,
                    token_file,
                },
            etcd,
            prefix,
            max_txn_ops,
            max_request_bytes,
            etcd_security,
            cmd,
        } => {
            if etcd.is_empty() {
                ctl::ctl(socket, tcp, token_file, cmd)
            } else {
                let limits = (max_txn_ops, max_request_bytes);
                ctl::fleet(&etcd, &prefix, &(*etcd_security).security(), limits, cmd)
            }
        }
        Cmd::Top {
            place:
                PlaceArgs {
                    socket,
                    tcp,
                    token_file,
                },
            interval_ms,
        } => match ctl::Place::resolve(socket, tcp, token_file) {
            Ok(place) => top::top(
                &place.target(),
                std::time::Duration::from_millis(interval_ms.max(50)),
            ),
            Err(code) => code,
        },
        Cmd::Run {
            config,
            print_config,
            hold_batches,
        } => run_cmd(
            config.as_deref(),
            print_config,
            run::TestHooks { hold_batches },
        ),
        Cmd::P4info => p4info_cmd(),
        Cmd::Rules {
            cmd:
                RulesCmd::Import {
                    format,
                    input,
                    out,
                    action,
                },
        } => import_cmd::import(&import_cmd::Args {
            format,
            input,
            out,
            action,
        }),
        Cmd::Replay(a) => replay_cmd::replay(a),
    }
}
