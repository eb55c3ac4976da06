//! The JSON value form of a rule: [`parse_rule`] reads one (every
//! problem named with the rule's position, id and field), [`rule_to_json`]
//! writes one. The grammar is in [`crate::rule`]'s docs; the fast path
//! from text ([`super::fast`]) gives the same rules and, for a text it does
//! not take, the errors of this reader.

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::acl_match::{AclMatch, PortRange};
use crate::exact_flow::{has_ports, ExactFlow, FlowError};
use crate::flow::{proto, FlowKey};
use crate::prefix::IpPrefix;
use crate::prefix_match::PrefixMatch;
use crate::rule::{Action, Dir, Match, Rule, RuleError, MAX_PRIORITY};

/// Parses and validates one rule given as JSON.
pub fn parse_rule(v: &Value, index: Option<usize>) -> Result<Rule, RuleError> {
    let id_hint = v.get("id").and_then(Value::as_u64);
    let err = |field: &str, msg: String| RuleError::new(index, id_hint, field, msg);
    let obj = v
        .as_object()
        .ok_or_else(|| err("", "a rule is an object with id, match, action".into()))?;
    check_keys(obj, &["id", "priority", "match", "action", "track"], "")
        .map_err(|(f, m)| err(&f, m))?;
    let id = match obj.get("id") {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| err("id", format!("{n} is not an integer 0..=4294967295")))?,
        Some(other) => return Err(err("id", format!("expected an integer, found {other}"))),
        None => return Err(err("id", "missing".into())),
    };
    let action: Action = match obj.get("action") {
        Some(a) => serde_json::from_value(a.clone()).map_err(|e| {
            err(
                "action",
                format!("{e} (expected \"drop\", \"allow\", \"count\" or {{\"redirect\": PORT}})"),
            )
        })?,
        None => return Err(err("action", "missing".into())),
    };
    let action = match obj.get("track") {
        None | Some(Value::Bool(false)) => action,
        Some(Value::Bool(true)) => action
            .with_track(true)
            .map_err(|e| err("track", e.to_string()))?,
        Some(other) => {
            return Err(err(
                "track",
                format!("expected true or false, found {other}"),
            ))
        }
    };
    let m = obj
        .get("match")
        .ok_or_else(|| err("match", "missing".into()))?
        .as_object()
        .ok_or_else(|| err("match", "expected an object".into()))?;
    let matcher = match obj.get("priority") {
        None => parse_match(m),
        Some(p) => parse_priority(p).and_then(|priority| parse_acl(m, priority)),
    }
    .map_err(|(f, msg)| err(&f, msg))?;
    Ok(Rule {
        id,
        matcher,
        action,
    })
}

type FieldErr = (String, String);

fn check_keys(obj: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), FieldErr> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err((
            join(path, k),
            format!("unknown field (expected one of: {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn parse_priority(p: &Value) -> Result<u32, FieldErr> {
    p.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n <= MAX_PRIORITY)
        .ok_or_else(|| {
            (
                "priority".into(),
                format!("{p} is not an integer 0..={MAX_PRIORITY}"),
            )
        })
}

/// A multi-field match: `src_prefix` and/or `dst_prefix` (the other
/// defaults to any address of the same family), `proto`, `sport` and
/// `dport` (a port, `"LO-HI"`, or absent for any).
fn parse_acl(m: &Map<String, Value>, priority: u32) -> Result<Match, FieldErr> {
    check_keys(
        m,
        &["src_prefix", "dst_prefix", "proto", "sport", "dport"],
        "match",
    )?;
    let prefix = |k: &str| -> Result<Option<IpPrefix>, FieldErr> {
        let field = format!("match.{k}");
        m.get(k)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| {
                        (
                            field.clone(),
                            "expected a string like \"10.0.0.0/8\"".into(),
                        )
                    })?
                    .parse::<IpPrefix>()
                    .map_err(|e| (field.clone(), e.to_string()))
            })
            .transpose()
    };
    let (src, dst) = match (prefix("src_prefix")?, prefix("dst_prefix")?) {
        (None, None) => {
            return Err((
                "match".into(),
                "a rule with a priority needs \"src_prefix\" or \"dst_prefix\" \
                 (\"0.0.0.0/0\" or \"::/0\" for any address)"
                    .into(),
            ))
        }
        (Some(s), None) => (s, IpPrefix::any(s.v6())),
        (None, Some(d)) => (IpPrefix::any(d.v6()), d),
        (Some(s), Some(d)) => (s, d),
    };
    let proto = m
        .get("proto")
        .map(|p| parse_proto(p, "match.proto"))
        .transpose()?;
    let range = |k: &str| -> Result<PortRange, FieldErr> {
        m.get(k).map_or(Ok(PortRange::ANY), |v| {
            parse_range(v, &format!("match.{k}"))
        })
    };
    let (sport, dport) = (range("sport")?, range("dport")?);
    let m = AclMatch::new(src, dst, proto, sport, dport)
        .map_err(|e| ("match.dst_prefix".to_string(), e.to_string()))?;
    Ok(Match::Acl { m, priority })
}

/// A port (`80`) or an inclusive range (`"1024-65535"`, or `"80"`).
fn parse_range(v: &Value, field: &str) -> Result<PortRange, FieldErr> {
    if let Some(s) = v.as_str() {
        let (lo, hi) = s.split_once('-').unwrap_or((s, s));
        let port = |p: &str| p.trim().parse::<u16>().ok();
        return match (port(lo), port(hi)) {
            (Some(lo), Some(hi)) => PortRange::new(lo, hi).ok_or_else(|| {
                (
                    field.into(),
                    format!("\"{s}\": the low port is above the high one"),
                )
            }),
            _ => Err((
                field.into(),
                format!("\"{s}\" is not a port or a range \"LO-HI\""),
            )),
        };
    }
    parse_port(v, field).map(PortRange::exact)
}

fn parse_match(m: &Map<String, Value>) -> Result<Match, FieldErr> {
    if let Some(k) = ["sport", "dport"].iter().find(|k| m.contains_key(**k)) {
        return Err((
            format!("match.{k}"),
            "port ranges are for rules with a \"priority\" (add one)".into(),
        ));
    }
    if m.contains_key("src_prefix") && m.contains_key("dst_prefix") {
        return Err((
            "priority".into(),
            "a rule matching both prefixes needs a \"priority\"".into(),
        ));
    }
    check_keys(
        m,
        &["flow", "src_prefix", "dst_prefix", "proto", "port"],
        "match",
    )?;
    let kinds = ["flow", "src_prefix", "dst_prefix"]
        .iter()
        .filter(|k| m.contains_key(**k))
        .count();
    if kinds != 1 {
        return Err((
            "match".into(),
            "needs exactly one of \"flow\", \"src_prefix\", \"dst_prefix\"".into(),
        ));
    }
    if let Some(flow) = m.get("flow") {
        if let Some(k) = ["proto", "port"].iter().find(|k| m.contains_key(**k)) {
            return Err((
                format!("match.{k}"),
                "belongs inside \"flow\" for an exact flow rule".into(),
            ));
        }
        let flow = flow
            .as_object()
            .ok_or_else(|| ("match.flow".to_string(), "expected an object".to_string()))?;
        return parse_flow(flow).map(Match::Flow);
    }
    let (dir, key) = if m.contains_key("src_prefix") {
        (Dir::Src, "src_prefix")
    } else {
        (Dir::Dst, "dst_prefix")
    };
    let field = format!("match.{key}");
    let prefix: IpPrefix = m[key]
        .as_str()
        .ok_or_else(|| {
            (
                field.clone(),
                "expected a string like \"10.0.0.0/8\"".to_string(),
            )
        })?
        .parse()
        .map_err(|e: crate::prefix::PrefixError| (field.clone(), e.to_string()))?;
    let proto = m
        .get("proto")
        .map(|p| parse_proto(p, "match.proto"))
        .transpose()?;
    let port = m
        .get("port")
        .map(|p| parse_port(p, "match.port"))
        .transpose()?;
    PrefixMatch::new(dir, prefix, proto, port)
        .map(Match::Prefix)
        .map_err(|e| ("match.port".into(), e.to_string()))
}

/// A 5-tuple written as a flow rule's match is (`src`, `dst`, `proto`, and
/// `sport`/`dport` for TCP and UDP): what `trace` asks about. The error
/// names the field.
pub fn parse_flow_key(v: &Value) -> Result<FlowKey, RuleError> {
    parse_exact_flow(v).map(|f| *f.key())
}

/// [`parse_flow_key`]'s 5-tuple as an exact-flow match.
pub fn parse_exact_flow(v: &Value) -> Result<ExactFlow, RuleError> {
    let Some(f) = v.as_object() else {
        return Err(RuleError::new(
            None,
            None,
            "",
            "expected an object {src, dst, proto, sport, dport}",
        ));
    };
    parse_flow(f).map_err(|(field, msg)| {
        RuleError::new(None, None, field.trim_start_matches("match.flow."), msg)
    })
}

fn parse_flow(f: &Map<String, Value>) -> Result<ExactFlow, FieldErr> {
    check_keys(f, &["src", "dst", "proto", "sport", "dport"], "match.flow")?;
    let addr = |k: &str| -> Result<IpAddr, FieldErr> {
        let field = format!("match.flow.{k}");
        f.get(k)
            .ok_or_else(|| (field.clone(), "missing".to_string()))?
            .as_str()
            .ok_or_else(|| (field.clone(), "expected an address string".to_string()))?
            .parse()
            .map_err(|_| (field.clone(), "not an IPv4 or IPv6 address".to_string()))
    };
    let src = addr("src")?;
    let dst = addr("dst")?;
    let p = parse_proto(
        f.get("proto")
            .ok_or_else(|| ("match.flow.proto".to_string(), "missing".to_string()))?,
        "match.flow.proto",
    )?;
    let has_ports = has_ports(p);
    let port = |k: &str| -> Result<u16, FieldErr> {
        let field = format!("match.flow.{k}");
        match (f.get(k), has_ports) {
            (Some(v), true) => parse_port(v, &field),
            (None, true) => Err((field, "missing (required for tcp and udp)".into())),
            (Some(_), false) => Err((field, "only tcp and udp flows have ports".into())),
            (None, false) => Ok(0),
        }
    };
    let sport = port("sport")?;
    let dport = port("dport")?;
    // Ports are checked above field by field (present for TCP and UDP,
    // absent otherwise); the family is the constructor's.
    ExactFlow::new(src, dst, p, sport, dport).map_err(|e| {
        let field = match e {
            FlowError::MixedFamilies => "match.flow.dst",
            _ => "match.flow",
        };
        (field.into(), e.to_string())
    })
}

/// A protocol by name (any case): tcp, udp, icmp, icmpv6 (or ipv6-icmp).
pub fn proto_by_name(s: &str) -> Option<u8> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Some(proto::TCP),
        "udp" => Some(proto::UDP),
        "icmp" => Some(proto::ICMP),
        "icmpv6" | "ipv6-icmp" => Some(proto::ICMPV6),
        _ => None,
    }
}

fn parse_proto(v: &Value, field: &str) -> Result<u8, FieldErr> {
    match v {
        Value::String(s) => proto_by_name(s).ok_or_else(|| {
            (
                field.into(),
                format!("unknown protocol \"{s}\" (a number 0..=255, or tcp, udp, icmp, icmpv6)"),
            )
        }),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .ok_or_else(|| {
                (
                    field.into(),
                    format!("{n} is not a protocol number 0..=255"),
                )
            }),
        other => Err((
            field.into(),
            format!("expected a protocol name or number, found {other}"),
        )),
    }
}

fn parse_port(v: &Value, field: &str) -> Result<u16, FieldErr> {
    v.as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| (field.into(), format!("{v} is not a port 0..=65535")))
}

/// The JSON form of a rule, as rule files write it (round-trips through
/// [`parse_rule`]).
pub fn rule_to_json(r: &Rule) -> Value {
    serde_json::to_value(r).expect("a rule serializes")
}
