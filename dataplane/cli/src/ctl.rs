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

/// `conns`'s parameters: only those given, a numeric protocol as a number.
fn conns_params(
    src: Option<String>,
    dst: Option<String>,
    proto: Option<String>,
    port: Option<u16>,
    limit: u64,
) -> Value {
    let mut p = json!({ "limit": limit });
    for (k, v) in [("src", src), ("dst", dst)] {
        if let Some(v) = v {
            p[k] = v.into();
        }
    }
    if let Some(proto) = proto {
        p["proto"] = proto
            .parse::<u64>()
            .map_or_else(|_| proto.into(), Value::from);
    }
    if let Some(port) = port {
        p["port"] = port.into();
    }
    p
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
    if let CtlCmd::Trace {
        pcap: Some(pcap),
        frame: Some(frame),
        text,
        ..
    } = &cmd
    {
        return match Place::resolve(socket, tcp, token_file) {
            Ok(place) => trace_frame(&place.target(), pcap, *frame, *text),
            Err(code) => code,
        };
    }
    let (method, params, as_text) = match request(cmd) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let place = match Place::resolve(socket, tcp, token_file) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let target = place.target();
    if as_text {
        return trace_text(&target, params);
    }
    ExitCode::from(client::run(&target, method, params))
}

/// Where a running node is reached: its Unix socket, or a TCP address
/// with the token (`cfdp ctl`, `cfdp top`).
pub struct Place {
    socket: Option<PathBuf>,
    tcp: Option<(String, cfdp_control::auth::Token)>,
}

impl Place {
    /// `--socket`, `--tcp` (with `--token-file`), or the embedded
    /// configuration's socket.
    pub fn resolve(
        socket: Option<PathBuf>,
        tcp: Option<String>,
        token_file: Option<PathBuf>,
    ) -> Result<Self, ExitCode> {
        match (socket, tcp) {
            (Some(s), _) => Ok(Self {
                socket: Some(s),
                tcp: None,
            }),
            (None, Some(addr)) => Ok(Self {
                socket: None,
                tcp: Some((addr, tcp_token(token_file)?)),
            }),
            (None, None) => Ok(Self {
                socket: Some(default_socket()?),
                tcp: None,
            }),
        }
    }

    pub fn target(&self) -> Target<'_> {
        match (&self.socket, &self.tcp) {
            (Some(p), _) => Target::Unix(p),
            (None, Some((addr, t))) => Target::Tcp {
                addr,
                token: t.as_str(),
            },
            (None, None) => unreachable!("resolve sets one"),
        }
    }
}

/// control.socket of the embedded configuration (after
/// CFDP_CONTROL__SOCKET).
fn default_socket() -> Result<PathBuf, ExitCode> {
    match crate::load::load_config(None) {
        Ok(c) if !c.control.socket.is_empty() => Ok(PathBuf::from(c.control.socket)),
        Ok(_) => {
            eprintln!("cfdp ctl: the default configuration has no control.socket: use --socket");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("cfdp ctl: config: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// The method, parameters and text flag (`trace --text`) of a command.
fn request(cmd: CtlCmd) -> Result<(&'static str, Value, bool), ExitCode> {
    let plain = |m: &'static str, p: Value| Ok((m, p, false));
    match cmd {
        CtlCmd::Apply {
            file,
            atomicity,
            expected_generation,
        } => plain("apply", read_apply(&file, atomicity, expected_generation)?),
        CtlCmd::Replace {
            file,
            expected_generation,
        } => {
            let mut params = json!({ "rules": read_rules(&file)? });
            if let Some(g) = expected_generation {
                params["expected_generation"] = g.into();
            }
            plain("replace", params)
        }
        CtlCmd::Rules { offset, limit } => {
            plain("rules", json!({"offset": offset, "limit": limit}))
        }
        CtlCmd::Get { id } => plain("get", json!({ "id": id })),
        CtlCmd::Stats => plain("stats", json!({})),
        CtlCmd::Conns {
            src,
            dst,
            proto,
            port,
            limit,
        } => plain("conns", conns_params(src, dst, proto, port, limit)),
        CtlCmd::Migrate { budget } => plain(
            "migrate",
            budget.map_or_else(|| json!({}), |b| json!({ "budget": b })),
        ),
        CtlCmd::Snapshot => plain("snapshot", json!({})),
        CtlCmd::Ping => plain("ping", json!({})),
        CtlCmd::Hello => plain("hello", json!({})),
        CtlCmd::Trace {
            src,
            dst,
            proto,
            sport,
            dport,
            text,
            ..
        } => {
            // Without --pcap, clap has required all three.
            let (Some(src), Some(dst), Some(proto)) = (src, dst, proto) else {
                eprintln!("cfdp ctl: trace needs --src, --dst and --proto, or --pcap and --frame");
                return Err(ExitCode::from(2));
            };
            let proto = proto
                .parse::<u8>()
                .map_or_else(|_| json!(proto), |n| json!(n));
            let mut p = json!({"src": src, "dst": dst, "proto": proto});
            let ported = matches!(p["proto"].as_str(), Some("tcp" | "udp" | "TCP" | "UDP"))
                || matches!(p["proto"].as_u64(), Some(6 | 17));
            if ported {
                p["sport"] = sport.unwrap_or(0).into();
                p["dport"] = dport.unwrap_or(0).into();
            }
            Ok(("trace", p, text))
        }
        CtlCmd::Fleet | CtlCmd::Wait { .. } => {
            eprintln!("cfdp ctl: fleet and wait talk to the fleet's etcd: give --etcd URL");
            Err(ExitCode::from(2))
        }
    }
}

/// The node's `trace` result for `params`, or the exit code after saying
/// why there is none.
fn ask_trace(target: &Target<'_>, params: Value) -> Result<Value, ExitCode> {
    let resp = client::Client::connect(target)
        .and_then(|mut c| c.call("trace", params))
        .map_err(|e| {
            eprintln!("cfdp ctl: {e}");
            ExitCode::from(2)
        })?;
    if let Some(e) = resp.get("error") {
        eprintln!(
            "cfdp ctl: error {}: {}",
            e["code"],
            e["message"].as_str().unwrap_or("?")
        );
        return Err(ExitCode::from(1));
    }
    Ok(resp["result"].clone())
}

/// `cfdp ctl trace --text`: the trace answer as lines a person reads.
fn trace_text(target: &Target<'_>, params: Value) -> ExitCode {
    match ask_trace(target, params) {
        Ok(t) => {
            print!("{}", render_trace(&t));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `cfdp ctl trace --pcap FILE --frame N`: the frame read here (with its
/// fragment state), its 5-tuple traced by the node; printed as `cfdp
/// replay --trace` prints, or as text.
fn trace_frame(target: &Target<'_>, pcap: &std::path::Path, frame: u64, text: bool) -> ExitCode {
    use crate::trace_cmd::{frame_key, FrameError, FrameKey};
    let mut v = match frame_key(pcap, frame) {
        Err(FrameError(msg, code)) => {
            eprintln!("cfdp ctl: trace: {msg}");
            return ExitCode::from(code);
        }
        Ok(FrameKey::Settled(v)) => v,
        Ok(FrameKey::Key {
            key,
            fragment,
            anomaly,
        }) => {
            let t = match ask_trace(target, key_params(&key)) {
                Ok(t) => t,
                Err(code) => return code,
            };
            if text {
                let anomaly = anomaly.map_or_else(String::new, |a| format!(" (anomaly: {a})"));
                print!(
                    "frame    {frame}: {fragment}{anomaly}\n{}",
                    render_trace(&t)
                );
                return ExitCode::SUCCESS;
            }
            json!({"decoded": "ip", "anomaly": anomaly, "fragment": fragment, "trace": t})
        }
    };
    v["frame"] = frame.into();
    if text {
        println!("frame    {frame}: {}", v["verdict"].as_str().unwrap_or("?"));
    } else {
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
    }
    ExitCode::SUCCESS
}

/// A 5-tuple as `trace` takes it (ports only for TCP and UDP).
fn key_params(k: &cfdp_rules::FlowKey) -> Value {
    let mut p =
        json!({"src": k.src_ip().to_string(), "dst": k.dst_ip().to_string(), "proto": k.proto});
    if k.proto == 6 || k.proto == 17 {
        p["sport"] = k.sport.into();
        p["dport"] = k.dport.into();
    }
    p
}

/// The text form of a `trace` result.
fn render_trace(t: &Value) -> String {
    let k = &t["key"];
    let rule = |r: &Value| {
        let rank = r["priority"].as_u64().map_or_else(
            || "no priority (ranks by its form)".to_string(),
            |p| format!("priority {p}"),
        );
        let action = r["action"]
            .as_str()
            .map_or_else(|| r["action"].to_string(), str::to_string);
        format!("rule {} {} -> {action}: {}", r["id"], rank, r["match"])
    };
    let mut s = format!(
        "packet   {}:{} -> {}:{} proto {}   (generation {}, {} mode)\n",
        k["src"].as_str().unwrap_or("?"),
        k["sport"],
        k["dst"].as_str().unwrap_or("?"),
        k["dport"],
        k["proto"],
        t["generation"],
        t["mode"].as_str().unwrap_or("?")
    );
    let c = &t["connection"];
    if !c.is_null() {
        // A tracked connection decides before any rule.
        s += &format!(
            "verdict  connection {} ({} direction) -> {}, opened by rule {}; without it:\n",
            c["state"].as_str().unwrap_or("?"),
            c["direction"].as_str().unwrap_or("?"),
            c["action"].as_str().unwrap_or("?"),
            c["rule"],
        );
    }
    s += &match t["rule"].is_null() {
        true => "verdict  no rule matches: forwarded\n".to_string(),
        false => format!("verdict  {}\n", rule(&t["rule"])),
    };
    let others: Vec<&Value> = t["matches"]
        .as_array()
        .map(|m| m.iter().filter(|r| r["id"] != t["rule"]["id"]).collect())
        .unwrap_or_default();
    for (i, r) in others.iter().enumerate() {
        let head = if i == 0 { "also" } else { "" };
        s += &format!("{head:<8} {} (lost: ranks lower)\n", rule(r));
    }
    for (i, st) in t["steps"].as_array().into_iter().flatten().enumerate() {
        let head = if i == 0 { "tables" } else { "" };
        let by = st["decided_by"].as_str().map_or_else(
            || "no rule".to_string(),
            |d| format!("rule in slot {} (decided by the {d})", st["slot"]),
        );
        let probed = st["tables_probed"]
            .as_u64()
            .map_or_else(String::new, |n| format!(", {n} tables probed"));
        s += &format!(
            "{head:<8} {}. {}: filter {}{probed} -> {by}\n",
            i + 1,
            st["table"].as_str().unwrap_or("?"),
            st["filter"].as_str().unwrap_or("?")
        );
    }
    if t["consistent"] == false {
        s += "note     the tables' answer is not the first match: a filter false positive \
              (filter-only mode) or a bug worth reporting\n";
    }
    s
}

/// The token for `--tcp`: `--token-file`, or control.token_file of the
/// embedded configuration (after CFDP_CONTROL__TOKEN_FILE).
fn tcp_token(token_file: Option<PathBuf>) -> Result<cfdp_control::auth::Token, ExitCode> {
    let path = match token_file {
        Some(p) => p,
        None => match crate::load::load_config(None) {
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
        } => {
            // Typed here, before etcd is touched: a batch that is not one
            // is a usage error (exit 2), as on the socket.
            let parsed = read_apply(&file, atomicity, expected_generation)
                .and_then(|v| typed(&file, cfdp_rules::parse_batch(&v, usize::MAX)));
            match parsed {
                Ok(batch) => Command::Apply { batch, limits },
                Err(code) => return code,
            }
        }
        CtlCmd::Replace {
            file,
            expected_generation,
        } => {
            let parsed = read_rules(&file).and_then(|v| match v.as_array() {
                Some(list) => typed(
                    &file,
                    list.iter()
                        .enumerate()
                        .map(|(i, r)| cfdp_rules::parse_rule(r, Some(i)))
                        .collect::<Result<Vec<_>, _>>(),
                ),
                None => typed(
                    &file,
                    Err("a rule file ({\"rules\": [...]}) or a list of rules"),
                ),
            });
            match parsed {
                Ok(rules) => Command::Replace {
                    rules,
                    expected_generation,
                    limits,
                },
                Err(code) => return code,
            }
        }
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

/// A parse result, or exit 2 with its error.
#[cfg(feature = "etcd")]
fn typed<T, E: std::fmt::Display>(file: &std::path::Path, r: Result<T, E>) -> Result<T, ExitCode> {
    r.map_err(|e| {
        eprintln!("cfdp ctl: {}: {e}", file.display());
        ExitCode::from(2)
    })
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
