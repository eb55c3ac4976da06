//! The control socket's JSON edge: a request line becomes a typed
//! [`Command`] (parameters checked and named here, before the control
//! thread sees anything), and a typed answer becomes a response line.

use cfdp_rules::protocol::{
    check_params, code, param_u64, ErrorReply, Method, ParamError, ParsedRequest,
};
use cfdp_rules::{parse_batch, RuleId};
use serde::Serialize;
use serde_json::{json, Value};

use crate::api::{ApplyCommand, Command, ControlError, Response};

/// The command a parsed request line asks for, or the error reply.
/// `max_batch` bounds an `apply` read from `params` (the fast path has
/// read the batch already); `parse_us`: µs spent on the line so far.
pub fn command(
    request: ParsedRequest,
    max_batch: usize,
    parse_us: u64,
) -> Result<Command, ErrorReply> {
    let ParsedRequest {
        req,
        batch,
        updates_text,
        rules_text,
    } = request;
    let p = &req.params;
    let bad = |e: &dyn std::fmt::Display| {
        ErrorReply::new(req.id.clone(), code::INVALID_PARAMS, e.to_string())
    };
    let none = |c: Command| check_params(p, &[]).map(|()| c).map_err(|e| bad(&e));
    match req.method {
        // The token (TCP's authentication) is the connection's business:
        // `server.rs` checks it before the request comes here.
        Method::Hello => check_params(p, Method::Hello.params())
            .map(|()| Command::Hello)
            .map_err(|e| bad(&e)),
        Method::Ping => none(Command::Ping),
        Method::Stats => none(Command::Stats),
        Method::Snapshot => none(Command::Snapshot),
        Method::Apply => {
            let t0 = std::time::Instant::now();
            let batch = batch.unwrap_or_else(|| parse_batch(p, max_batch));
            Ok(Command::Apply(ApplyCommand {
                batch,
                updates_text,
                parse_us: parse_us + t0.elapsed().as_micros() as u64,
                bound: crate::api::BatchBound::Request,
            }))
        }
        Method::Get => {
            let n = check_params(p, &["id"])
                .and_then(|()| param_u64(p, "id"))
                .map_err(|e| bad(&e))?
                .ok_or_else(|| bad(&"id: missing"))?;
            RuleId::try_from(n)
                .map(Command::Get)
                .map_err(|_| error_reply(&req.id, &ControlError::NotFound(n)))
        }
        Method::Migrate => check_params(p, &["budget"])
            .and_then(|()| param_u64(p, "budget"))
            .map(|budget| Command::Migrate { budget })
            .map_err(|e| bad(&e)),
        Method::Rules => {
            let (offset, limit) = check_params(p, &["offset", "limit"])
                .and_then(|()| Ok((param_u64(p, "offset")?, param_u64(p, "limit")?)))
                .map_err(|e| bad(&e))?;
            Ok(Command::Rules {
                offset: offset.unwrap_or(0),
                limit: limit.unwrap_or(1000),
            })
        }
        Method::Trace => cfdp_rules::parse_flow_key(p)
            .map(Command::Trace)
            .map_err(|e| bad(&e)),
        Method::Conns => conns_query(p).map_err(|e| bad(&e)),
        Method::Replace => {
            check_params(p, Method::Replace.params()).map_err(|e| bad(&e))?;
            let expected_generation = param_u64(p, "expected_generation").map_err(|e| bad(&e))?;
            // The list as received (the envelope kept it as text); a
            // request that came through the detailed path has it in params.
            let text = match (rules_text, p.get("rules")) {
                (Some(t), _) => t,
                (None, Some(v)) => v.to_string(),
                (None, None) => String::new(),
            };
            if !text.starts_with('[') {
                return Err(bad(&"rules: a list of rules is required"));
            }
            let rules = cfdp_rules::parse_rule_list(&text).map_err(|e| bad(&e))?;
            Ok(Command::Replace {
                rules,
                expected_generation,
            })
        }
    }
}

/// Connections listed at most by one `conns`.
pub const MAX_CONNS: u64 = 10_000;

/// `conns`'s parameters: `src`/`dst` a prefix or address, `proto` a name
/// or number, `port`, `limit` (100 unless given, at most [`MAX_CONNS`]).
fn conns_query(p: &Value) -> Result<Command, ParamError> {
    check_params(p, Method::Conns.params())?;
    let prefix = |k: &str| -> Result<Option<cfdp_rules::IpPrefix>, ParamError> {
        match p.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => s.parse().map(Some).map_err(|source| ParamError::Prefix {
                name: k.to_string(),
                source,
            }),
            Some(_) => Err(ParamError::NotAString(k.to_string())),
        }
    };
    let proto = match p.get("proto") {
        None => None,
        Some(Value::String(s)) => Some(
            cfdp_rules::proto_by_name(s).ok_or_else(|| ParamError::UnknownProtocol(s.clone()))?,
        ),
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or(ParamError::NotAProtocol)?,
        ),
    };
    let port = param_u64(p, "port")?
        .map(|n| {
            u16::try_from(n).map_err(|_| ParamError::NotAPort {
                name: "port".into(),
                value: n,
            })
        })
        .transpose()?;
    let limit = param_u64(p, "limit")?.unwrap_or(100);
    if limit == 0 || limit > MAX_CONNS {
        return Err(ParamError::OutOfRange {
            name: "limit".into(),
            value: limit,
            max: MAX_CONNS,
        });
    }
    Ok(Command::Conns {
        query: cfdp_conntrack::ConnQuery {
            src: prefix("src")?,
            dst: prefix("dst")?,
            proto,
            port,
        },
        limit: limit as usize,
    })
}

/// The error reply for `e`, with the current generation as `data` for a
/// mismatch.
pub fn error_reply(id: &Value, e: &ControlError) -> ErrorReply {
    let reply = ErrorReply::new(id.clone(), e.code(), e.to_string());
    match e.current_generation() {
        Some(g) => reply.with_data(json!({"current_generation": g})),
        None => reply,
    }
}

/// The response line (no newline) for an answer, serialized straight from
/// the typed answer: building a JSON tree first (a map per update result)
/// cost ~0.75 ms for a 1024-update batch, the text directly ~10 µs.
/// `extra`: fields a fleet node adds to a successful result.
pub fn answer_line(
    id: &Value,
    answer: &Result<Response, ControlError>,
    extra: Option<(&str, Value)>,
) -> String {
    #[derive(Serialize)]
    struct Answer<'a, T: Serialize> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: T,
    }
    let text = |result| {
        serde_json::to_string(&Answer {
            jsonrpc: "2.0",
            id,
            result,
        })
    };
    let line = match (answer, extra) {
        (Err(e), _) => Ok(error_reply(id, e).to_json().to_string()),
        (Ok(r), None) => text(r),
        (Ok(r), Some((key, v))) => serde_json::to_value(r).and_then(|mut result| {
            if let Some(o) = result.as_object_mut() {
                o.insert(key.to_string(), v);
            }
            serde_json::to_string(&Answer {
                jsonrpc: "2.0",
                id,
                result,
            })
        }),
    };
    // Every answer type serializes (plain data, string keys): a failure
    // here is a bug, answered as an internal error rather than a panic.
    line.unwrap_or_else(|e| {
        ErrorReply::new(id.clone(), code::INTERNAL, format!("answer: {e}"))
            .to_json()
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `conns`'s parameters are refused by what failed, as typed errors.
    #[test]
    fn conns_parameters_are_refused_by_variant() {
        let err = |p: Value| conns_query(&p).err();
        assert_eq!(
            err(json!({"proto": "nope"})),
            Some(ParamError::UnknownProtocol("nope".into()))
        );
        assert_eq!(err(json!({"proto": 300})), Some(ParamError::NotAProtocol));
        assert_eq!(
            err(json!({"port": 70000})),
            Some(ParamError::NotAPort {
                name: "port".into(),
                value: 70000
            })
        );
        assert_eq!(
            err(json!({"src": 5})),
            Some(ParamError::NotAString("src".into()))
        );
        assert!(matches!(
            err(json!({"dst": "10.0.0.1/40"})),
            Some(ParamError::Prefix { ref name, .. }) if name == "dst"
        ));
        assert_eq!(
            err(json!({"limit": 0})),
            Some(ParamError::OutOfRange {
                name: "limit".into(),
                value: 0,
                max: MAX_CONNS
            })
        );
        assert!(err(json!({"src": "10.0.0.0/8", "proto": "udp", "port": 53})).is_none());
    }
}
