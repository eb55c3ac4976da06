//! `cfdp ctl`: one request to a running `cfdp run`, by the control
//! protocol's client (`cfdp_control::client`).

use std::path::PathBuf;
use std::process::ExitCode;

use cfdp_control::client::{self, Target};
use serde_json::{json, Value};

use crate::CtlCmd;

/// `apply`'s batch from FILE, with the command line's overrides; on a bad
/// file the message is printed and the exit code returned.
fn read_apply(
    file: &std::path::Path,
    atomicity: Option<String>,
    expected_generation: Option<u64>,
) -> Result<Value, ExitCode> {
    let mut batch = match client::read_batch(file) {
        Ok(b) if b.is_object() => b,
        Ok(_) => {
            eprintln!("cfdp ctl: {}: a batch is a JSON object", file.display());
            return Err(ExitCode::from(2));
        }
        Err(e) => {
            eprintln!("cfdp ctl: {e}");
            return Err(ExitCode::from(2));
        }
    };
    if let Some(a) = atomicity {
        batch["atomicity"] = a.into();
    }
    if let Some(g) = expected_generation {
        batch["expected_generation"] = g.into();
    }
    Ok(batch)
}

/// `replace`'s rules from FILE (a rule file or a bare list).
fn read_rules(file: &std::path::Path) -> Result<Value, ExitCode> {
    client::read_batch(file)
        .map(|v| v.get("rules").cloned().unwrap_or(v))
        .map_err(|e| {
            eprintln!("cfdp ctl: {e}");
            ExitCode::from(2)
        })
}

pub fn ctl(
    socket: Option<PathBuf>,
    tcp: Option<String>,
    token_file: Option<PathBuf>,
    cmd: CtlCmd,
) -> ExitCode {
    let (method, params) = match cmd {
        CtlCmd::Apply {
            file,
            atomicity,
            expected_generation,
        } => match read_apply(&file, atomicity, expected_generation) {
            Ok(batch) => ("apply", batch),
            Err(code) => return code,
        },
        CtlCmd::Replace {
            file,
            expected_generation,
        } => {
            let rules = match read_rules(&file) {
                Ok(r) => r,
                Err(code) => return code,
            };
            let mut params = json!({ "rules": rules });
            if let Some(g) = expected_generation {
                params["expected_generation"] = g.into();
            }
            ("replace", params)
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
        CtlCmd::Fleet | CtlCmd::Wait { .. } => {
            eprintln!("cfdp ctl: fleet and wait talk to the fleet's etcd: give --etcd URL");
            return ExitCode::from(2);
        }
    };
    let socket = match (socket, &tcp) {
        (Some(s), _) => Some(s),
        (None, Some(_)) => None,
        (None, None) => match crate::config::load_config(None) {
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
    let token = match (&socket, &tcp) {
        (None, Some(_)) => match tcp_token(token_file) {
            Ok(t) => Some(t),
            Err(code) => return code,
        },
        _ => None,
    };
    let target = match (&socket, &tcp, &token) {
        (Some(p), _, _) => Target::Unix(p),
        (None, Some(addr), Some(t)) => Target::Tcp {
            addr,
            token: t.as_str(),
        },
        _ => unreachable!("one target is always set, and TCP has its token"),
    };
    ExitCode::from(client::run(&target, method, params))
}

/// The token for `--tcp`: `--token-file`, or control.token_file of the
/// embedded configuration (after CFDP_CONTROL__TOKEN_FILE).
fn tcp_token(token_file: Option<PathBuf>) -> Result<cfdp_control::auth::Token, ExitCode> {
    let path = match token_file {
        Some(p) => p,
        None => match crate::config::load_config(None) {
            Ok(c) => PathBuf::from(c.control.token_file),
            Err(e) => {
                eprintln!("cfdp ctl: config: {e}");
                return Err(ExitCode::from(2));
            }
        },
    };
    cfdp_control::auth::Token::read(&path).map_err(|e| {
        eprintln!("cfdp ctl: {e}");
        ExitCode::from(2)
    })
}

/// `cfdp ctl --etcd …`: the fleet's rule set in etcd (`cfdp_cluster::ctl`).
#[cfg(feature = "etcd")]
pub fn fleet(
    etcd: &[String],
    prefix: &str,
    security: &cfdp_cluster::EtcdSecurity,
    (max_txn_ops, max_request_bytes): (usize, usize),
    cmd: CtlCmd,
) -> ExitCode {
    use cfdp_cluster::ctl::{run, Command, TxnLimits};
    let limits = TxnLimits {
        max_txn_ops,
        max_request_bytes,
    };
    let cmd = match cmd {
        CtlCmd::Apply {
            file,
            atomicity,
            expected_generation,
        } => match read_apply(&file, atomicity, expected_generation) {
            Ok(batch) => Command::Apply { batch, limits },
            Err(code) => return code,
        },
        CtlCmd::Replace {
            file,
            expected_generation,
        } => match read_rules(&file) {
            Ok(rules) => Command::Replace {
                rules,
                expected_generation,
                limits,
            },
            Err(code) => return code,
        },
        CtlCmd::Rules { .. } => Command::Rules,
        CtlCmd::Get { id } => Command::Get { id: id.into() },
        CtlCmd::Fleet => Command::Fleet,
        CtlCmd::Wait {
            generation,
            timeout,
        } => Command::Wait {
            generation,
            timeout: std::time::Duration::from_secs_f64(timeout.max(0.0)),
        },
        _ => {
            eprintln!(
                "cfdp ctl: with --etcd: apply, replace, rules, get, fleet, wait (a node's own \
                 statistics: --socket)"
            );
            return ExitCode::from(2);
        }
    };
    ExitCode::from(run(etcd, security, prefix, cmd))
}

#[cfg(not(feature = "etcd"))]
pub fn fleet(
    _: &[String],
    _: &str,
    _: &cfdp_cluster::EtcdSecurity,
    _: (usize, usize),
    _: CtlCmd,
) -> ExitCode {
    eprintln!(
        "cfdp ctl: this cfdp was built without etcd: cargo build --release -p cfdp \
         --features etcd (needs protoc: apt-get install protobuf-compiler)"
    );
    ExitCode::from(2)
}
