//! The JSON value form of a rule: [`parse_rule`] reads one (every
//! problem named with the rule's position, id and field), [`rule_to_json`]
//! writes one. The grammar is in [`crate::rule`]'s docs; the fast path
//! from text ([`super::fast`]) gives the same rules and, for a text it does
//! not take, the errors of this reader.

use serde_json::{Map, Value};

use crate::codec::shape::{Raw, RawFlow, RawMatch, RawPort, RawProto, RawRule};
use crate::codec::validate::{self, FieldErr, ACL_KEYS, FLOW_KEYS, PLAIN_KEYS};
use crate::exact_flow::ExactFlow;
use crate::flow::FlowKey;
use crate::rule::{Action, Rule, RuleError, MAX_PRIORITY};

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
    let track = match obj.get("track") {
        None => None,
        Some(Value::Bool(t)) => Some(*t),
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
    let priority = match obj.get("priority") {
        None => None,
        Some(p) => Some(p.as_u64().ok_or_else(|| {
            err(
                "priority",
                format!("{p} is not an integer 0..={MAX_PRIORITY}"),
            )
        })?),
    };
    raw_match(m, priority.is_some())
        .and_then(|matcher| {
            validate::rule(RawRule {
                id,
                priority,
                matcher,
                action,
                track,
            })
        })
        .map_err(|(f, msg)| err(&f, msg))
}

fn check_keys(obj: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), FieldErr> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err((join(path, k), validate::unknown_key(allowed))),
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

/// A rule's `match` object in the raw form (each field's JSON type
/// checked, nothing more): [`validate::matcher`] decides what it is. A key
/// neither form has is named with the keys of the rule's form (`acl`: it
/// has a priority).
fn raw_match(m: &Map<String, Value>, acl: bool) -> Result<RawMatch<'_>, FieldErr> {
    let allowed: &[&str] = if acl { &ACL_KEYS } else { &PLAIN_KEYS };
    let known = |k: &str| PLAIN_KEYS.contains(&k) || ACL_KEYS.contains(&k);
    if let Some(k) = m.keys().find(|k| !known(k)) {
        return Err((join("match", k), validate::unknown_key(allowed)));
    }
    let prefix = |k: &str| -> Result<Option<&str>, FieldErr> {
        m.get(k)
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    (
                        format!("match.{k}"),
                        "expected a string like \"10.0.0.0/8\"".into(),
                    )
                })
            })
            .transpose()
    };
    let flow = m
        .get("flow")
        .map(|f| {
            f.as_object()
                .ok_or_else(|| ("match.flow".to_string(), "expected an object".to_string()))
                .and_then(raw_flow)
        })
        .transpose()?;
    let range = |k: &str| {
        m.get(k)
            .map(|v| raw_port(v, &format!("match.{k}")))
            .transpose()
    };
    Ok(RawMatch {
        flow,
        src_prefix: prefix("src_prefix")?.map(Raw::Text),
        dst_prefix: prefix("dst_prefix")?.map(Raw::Text),
        proto: m
            .get("proto")
            .map(|p| raw_proto(p, "match.proto"))
            .transpose()?,
        port: m
            .get("port")
            .map(|p| parse_port(p, "match.port"))
            .transpose()?,
        sport: range("sport")?,
        dport: range("dport")?,
    })
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
    raw_flow(f)
        .and_then(validate::flow)
        .map_err(|(field, msg)| {
            RuleError::new(None, None, field.trim_start_matches("match.flow."), msg)
        })
}

/// A flow's object in the raw form.
fn raw_flow(f: &Map<String, Value>) -> Result<RawFlow<'_>, FieldErr> {
    check_keys(f, &FLOW_KEYS, "match.flow")?;
    let addr = |k: &str| -> Result<&str, FieldErr> {
        let field = format!("match.flow.{k}");
        f.get(k)
            .ok_or_else(|| (field.clone(), "missing".to_string()))?
            .as_str()
            .ok_or_else(|| (field, "expected an address string".to_string()))
    };
    let (src, dst) = (addr("src")?, addr("dst")?);
    let proto = raw_proto(
        f.get("proto")
            .ok_or_else(|| ("match.flow.proto".to_string(), "missing".to_string()))?,
        "match.flow.proto",
    )?;
    let port = |k: &str| {
        f.get(k)
            .map(|v| parse_port(v, &format!("match.flow.{k}")))
            .transpose()
    };
    Ok(RawFlow {
        src: Raw::Text(src),
        dst: Raw::Text(dst),
        proto,
        sport: port("sport")?,
        dport: port("dport")?,
    })
}

/// A protocol as written: a number 0..=255 or a name (which the validator
/// looks up).
fn raw_proto<'a>(v: &'a Value, field: &str) -> Result<RawProto<'a>, FieldErr> {
    match v {
        Value::String(s) => Ok(RawProto::Name(s)),
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .map(RawProto::Number)
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

/// A multi-field rule's port as written: a range's text, or a port.
fn raw_port<'a>(v: &'a Value, field: &str) -> Result<RawPort<'a>, FieldErr> {
    match v.as_str() {
        Some(s) => Ok(RawPort::Text(s)),
        None => parse_port(v, field).map(RawPort::Number),
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
