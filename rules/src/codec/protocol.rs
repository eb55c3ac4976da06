//! The control protocol's envelope: newline-delimited JSON in the style of
//! JSON-RPC 2.0 (`id`, `method`, `params`; one response per request, the
//! same `id` back). Pure parsing and formatting, no I/O: the control server
//! in `cfdp-control` feeds it lines, and the fuzz target
//! `rules/fuzz/fuzz_targets/request.rs` feeds it anything.
//!
//! See `rules/PROTOCOL.md` for the methods and examples.

use serde_json::{json, Value};

/// API version reported by `hello`. Bumped on incompatible changes.
pub const API_VERSION: u32 = 1;

/// The methods the control server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Hello,
    Apply,
    Rules,
    Get,
    Stats,
    Migrate,
    Snapshot,
    Ping,
    /// The whole intended rule set: only the difference is applied, as one
    /// atomic batch.
    Replace,
    /// Which rule a 5-tuple gets, and why.
    Trace,
    /// Tracked connections (stateful rules), filtered.
    Conns,
}

impl Method {
    pub const ALL: [Method; 11] = [
        Method::Hello,
        Method::Apply,
        Method::Replace,
        Method::Rules,
        Method::Get,
        Method::Stats,
        Method::Migrate,
        Method::Snapshot,
        Method::Ping,
        Method::Trace,
        Method::Conns,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Hello => "hello",
            Method::Apply => "apply",
            Method::Rules => "rules",
            Method::Get => "get",
            Method::Stats => "stats",
            Method::Migrate => "migrate",
            Method::Snapshot => "snapshot",
            Method::Ping => "ping",
            Method::Replace => "replace",
            Method::Trace => "trace",
            Method::Conns => "conns",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The parameters the method takes: any other is refused by name.
    pub fn params(self) -> &'static [&'static str] {
        match self {
            Method::Hello => &["token"],
            Method::Apply => &["atomicity", "expected_generation", "updates"],
            Method::Rules => &["offset", "limit"],
            Method::Get => &["id"],
            Method::Migrate => &["budget"],
            Method::Replace => &["rules", "expected_generation"],
            Method::Trace => &["src", "dst", "proto", "sport", "dport"],
            Method::Conns => &["src", "dst", "proto", "port", "limit"],
            Method::Stats | Method::Snapshot | Method::Ping => &[],
        }
    }
}

/// The longest line whose problems [`parse_request_line`] names in
/// detail: past it, a line that is not a well-formed request in the plain
/// envelope is refused without building its JSON tree (a tree costs about
/// sixteen times the line's bytes).
pub const DETAILED_ERRORS_MAX: usize = 64 << 10;

/// Error codes. The JSON-RPC 2.0 ones, plus cfdp's own in the
/// implementation-defined range −32000..−32099.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    /// `expected_generation` differs from the current generation.
    pub const GENERATION_MISMATCH: i64 = -32001;
    /// The request line exceeded the server's limit.
    pub const REQUEST_TOO_LARGE: i64 = -32002;
    /// The batch could not be made durable (journal write failed); nothing
    /// was applied.
    pub const NOT_DURABLE: i64 = -32003;
    /// The server is shutting down.
    pub const SHUTTING_DOWN: i64 = -32004;
    /// The requested object does not exist (e.g. `get` of an unknown id).
    pub const NOT_FOUND: i64 = -32005;
    /// A TCP connection must authenticate first (`hello` with its token).
    pub const UNAUTHORIZED: i64 = -32006;
}

/// A request that passed the envelope checks.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Echoed in the response: a number, a string or null.
    pub id: Value,
    pub method: Method,
    /// `{}` when absent.
    pub params: Value,
}

/// An error response waiting to be sent.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorReply {
    pub id: Value,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl ErrorReply {
    pub fn new(id: Value, code: i64, message: impl Into<String>) -> Self {
        Self {
            id,
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        json!({"jsonrpc": "2.0", "id": self.id, "error": e})
    }
}

/// A success response.
pub fn result_reply(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// Parses one request line (without its newline). Every failure comes back
/// as an error reply carrying the request's `id` when one could be read, so
/// the client can match it, and the connection stays usable.
pub fn parse_request(line: &[u8]) -> Result<Request, ErrorReply> {
    let v: Value = serde_json::from_slice(line).map_err(|e| {
        ErrorReply::new(
            Value::Null,
            code::PARSE_ERROR,
            format!("not valid JSON: {e}"),
        )
    })?;
    let Value::Object(mut obj) = v else {
        return Err(ErrorReply::new(
            Value::Null,
            code::INVALID_REQUEST,
            "a request is a JSON object {\"id\": ..., \"method\": ..., \"params\": ...}",
        ));
    };
    let id = match obj.get("id") {
        None => Value::Null,
        Some(id @ (Value::Number(_) | Value::String(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Err(ErrorReply::new(
                Value::Null,
                code::INVALID_REQUEST,
                "id: must be a number, a string or null",
            ))
        }
    };
    let bad = |msg: String| ErrorReply::new(id.clone(), code::INVALID_REQUEST, msg);
    if let Some(k) = obj
        .keys()
        .find(|k| !["jsonrpc", "id", "method", "params"].contains(&k.as_str()))
    {
        return Err(bad(format!(
            "{k}: unknown field (jsonrpc, id, method, params)"
        )));
    }
    if let Some(ver) = obj.get("jsonrpc") {
        if ver != "2.0" {
            return Err(bad(format!("jsonrpc: {ver} is not \"2.0\"")));
        }
    }
    let name = obj
        .get("method")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("method: missing or not a string".into()))?;
    let method = Method::parse(name).ok_or_else(|| {
        let known: Vec<_> = Method::ALL.iter().map(|m| m.name()).collect();
        ErrorReply::new(
            id.clone(),
            code::METHOD_NOT_FOUND,
            format!("unknown method '{name}' (known: {})", known.join(", ")),
        )
    })?;
    // Taken out of the request, not copied: a batch's params are most of
    // the line (a deep copy of 1024 rules cost as much as parsing them).
    let params = match obj.remove("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(ErrorReply::new(
                id,
                code::INVALID_PARAMS,
                "params: must be an object",
            ))
        }
    };
    Ok(Request { id, method, params })
}

/// A request with, for `apply`, its batch already parsed.
#[derive(Debug)]
pub struct ParsedRequest {
    pub req: Request,
    /// `apply`'s batch, parsed from the line's text (the request's `params`
    /// are then `{}`); `None` for other methods, or when the request took
    /// the slow path (then parse `params` with [`crate::parse_batch`]).
    pub batch: Option<Result<crate::Batch, crate::BatchError>>,
    /// The text of the batch's `updates` list as received, when the fast
    /// path read it (one line of JSON the value parser reads back as the
    /// same updates): what the journal records when the whole batch
    /// applies, instead of serializing it again.
    pub updates_text: Option<String>,
    /// `replace`'s `rules` list as received (its `params` then lack it):
    /// read by the rule-file parser, never as a JSON tree.
    pub rules_text: Option<String>,
}

impl ParsedRequest {
    /// An `apply` whose batch was read from the line's text, with the
    /// updates' text as received.
    fn apply(id: Value, batch: crate::Batch, updates_text: &str) -> Self {
        ParsedRequest {
            req: Request {
                id,
                method: Method::Apply,
                params: json!({}),
            },
            batch: Some(Ok(batch)),
            updates_text: Some(updates_text.to_string()),
            rules_text: None,
        }
    }
}

/// Reads a `params` object without building its tree: the values of the
/// method's own parameters are kept as raw text, and the first other name
/// is remembered while its value is skipped (`IgnoredAny` walks it without
/// allocating). Hand-written because serde's derive would either build
/// the tree (`Value`) or stop at the first unknown name without telling
/// which it was in a form the protocol can answer.
struct ParamsSeed(&'static [&'static str]);

/// The first parameter name a method does not take.
struct UnknownParam(String);

/// The kept parameters, or the first unknown name.
type RawParams<'de> = Result<Vec<(&'static str, &'de serde_json::value::RawValue)>, UnknownParam>;

impl<'de> serde::de::DeserializeSeed<'de> for ParamsSeed {
    type Value = RawParams<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ParamsSeed {
    type Value = RawParams<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        let mut unknown = None;
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.0.iter().find(|&&a| a == k) {
                Some(&name) => kept.push((name, m.next_value()?)),
                None => {
                    unknown.get_or_insert_with(|| k.into_owned());
                    m.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(unknown.map_or(Ok(kept), |name| Err(UnknownParam(name))))
    }
}

/// A method's `params` (other than `apply`'s) read from their raw text:
/// unknown names refused, values that must be single values refused when
/// they are lists or objects, `replace`'s `rules` kept as text.
fn method_params(
    id: &Value,
    method: Method,
    raw: &serde_json::value::RawValue,
) -> Option<Result<(Value, Option<String>), ErrorReply>> {
    use serde::de::DeserializeSeed;
    let bad = |e: String| Some(Err(ErrorReply::new(id.clone(), code::INVALID_PARAMS, e)));
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let kept = match ParamsSeed(method.params()).deserialize(&mut de) {
        Ok(Ok(kept)) => kept,
        Ok(Err(UnknownParam(name))) => {
            return bad(ParamError::Unknown {
                name,
                allowed: method.params().join(", "),
            }
            .to_string())
        }
        Err(_) => return None,
    };
    let mut params = serde_json::Map::new();
    let mut rules_text = None;
    for (name, v) in kept {
        if method == Method::Replace && name == "rules" {
            rules_text = Some(v.get().to_string());
        } else if v.get().starts_with(['[', '{']) {
            return bad(format!(
                "{name}: must be a single value, not a list or an object"
            ));
        } else {
            params.insert(name.to_string(), serde_json::from_str(v.get()).ok()?);
        }
    }
    Some(Ok((Value::Object(params), rules_text)))
}

/// Parses one request line like [`parse_request`], and an `apply`'s batch
/// straight from its text (`parse_batch_text`): no JSON tree of a
/// thousand-rule batch is built. Anything unusual in the envelope goes
/// through [`parse_request`], which answers and names the problem.
pub fn parse_request_line(line: &[u8], max_batch: usize) -> Result<ParsedRequest, ErrorReply> {
    use crate::codec::shape::present;
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[serde(default, deserialize_with = "present", borrow)]
        jsonrpc: Option<&'a str>,
        #[serde(default, borrow)]
        id: Option<&'a RawValue>,
        method: &'a str,
        #[serde(default, borrow)]
        params: Option<&'a RawValue>,
    }
    // The plain spelling byte by byte: one pass, no tree, and the updates'
    // text kept for the journal. Anything else: the envelope with serde.
    if let Some(p) = std::str::from_utf8(line)
        .ok()
        .and_then(crate::codec::strict::apply_request)
    {
        let (id, text) = (p.id.clone(), p.updates_text);
        if let Some(batch) = crate::fast::plain_batch(p, max_batch) {
            return Ok(ParsedRequest::apply(id, batch, text));
        }
    }
    let fast = (|| {
        let e: Envelope = serde_json::from_slice(line).ok()?;
        if e.jsonrpc.is_some_and(|v| v != "2.0") {
            return None;
        }
        let id = match e.id {
            None => Value::Null,
            Some(raw) => match serde_json::from_str(raw.get()).ok()? {
                v @ (Value::Number(_) | Value::String(_) | Value::Null) => v,
                _ => return None,
            },
        };
        let method = Method::parse(e.method)?;
        let (params, batch, rules_text) = match e.params {
            None => (json!({}), None, None),
            Some(raw) if !raw.get().starts_with('{') => return None,
            Some(raw) if method == Method::Apply => (
                json!({}),
                Some(crate::parse_batch_text(raw.get(), max_batch)),
                None,
            ),
            Some(raw) => match method_params(&id, method, raw)? {
                Ok((params, rules_text)) => (params, None, rules_text),
                Err(e) => return Some(Err(e)),
            },
        };
        Some(Ok(ParsedRequest {
            req: Request { id, method, params },
            batch,
            updates_text: None,
            rules_text,
        }))
    })();
    match fast {
        Some(Ok(p)) if !has_errors(&p) => Ok(p),
        // Something was refused. The envelope reader skips what it need
        // not read (it does not range-check a number it skips, say), so on
        // lines small enough to read whole the value path is asked too: a
        // line that is not JSON at all is answered as such, and the fast
        // refusal stands only for a request the value path would take.
        Some(r) if line.len() > DETAILED_ERRORS_MAX => r,
        Some(r) => parse_request(line).and(r),
        None if line.len() > DETAILED_ERRORS_MAX => Err(ErrorReply::new(
            Value::Null,
            code::INVALID_REQUEST,
            format!(
                "not a valid request ({} bytes; past {DETAILED_ERRORS_MAX} bytes only the plain \
                 envelope is read: {{\"jsonrpc\": \"2.0\", \"id\": ..., \"method\": ..., \"params\": {{...}}}})",
                line.len()
            ),
        )),
        None => parse_request(line).map(|req| ParsedRequest {
            req,
            batch: None,
            updates_text: None,
            rules_text: None,
        }),
    }
}

/// Whether an `apply`'s batch, read from the text, holds a refusal.
fn has_errors(p: &ParsedRequest) -> bool {
    match &p.batch {
        Some(Ok(b)) => b.updates.iter().any(Result::is_err),
        Some(Err(_)) => true,
        None => false,
    }
}

/// Why a request's parameters were refused (answered `invalid_params`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("params: must be an object")]
    NotAnObject,
    /// `allowed`: the method's parameters, comma-separated (empty: none).
    #[error("{name}: unknown parameter ({})", if allowed.is_empty() { "this method takes none" } else { allowed })]
    Unknown { name: String, allowed: String },
    #[error("{0}: not a non-negative integer")]
    NotUnsigned(String),
    /// A prefix or address parameter that does not parse.
    #[error("{name}: {source}")]
    Prefix {
        name: String,
        #[source]
        source: crate::PrefixError,
    },
    #[error("{0}: expected a prefix or address string")]
    NotAString(String),
    #[error("proto: unknown protocol {0:?}")]
    UnknownProtocol(String),
    #[error("proto: not a protocol (0..=255 or a name)")]
    NotAProtocol,
    #[error("{name}: {value} is not a port")]
    NotAPort { name: String, value: u64 },
    #[error("{name}: {value}: 1 to {max}")]
    OutOfRange { name: String, value: u64, max: u64 },
}

/// Reads an optional non-negative integer parameter.
pub fn param_u64(params: &Value, name: &str) -> Result<Option<u64>, ParamError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ParamError::NotUnsigned(name.to_string())),
    }
}

/// Refuses parameters other than `allowed`.
pub fn check_params(params: &Value, allowed: &[&str]) -> Result<(), ParamError> {
    match params.as_object() {
        Some(o) => match o.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(ParamError::Unknown {
                name: k.clone(),
                allowed: allowed.join(", "),
            }),
            None => Ok(()),
        },
        None => Err(ParamError::NotAnObject),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's find: an unknown parameter is refused by the
    /// line parser itself, naming it (the value path leaves it to the
    /// server).
    #[test]
    fn unknown_parameters_are_refused_by_name_without_a_tree() {
        let e = parse_request_line(br#"{"id":3,"method":"rules","params":{"off":10}}"#, 16)
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(
            e.message
                .starts_with("off: unknown parameter (offset, limit)"),
            "{}",
            e.message
        );
        assert_eq!(e.id, json!(3));
        let e =
            parse_request_line(br#"{"id":4,"method":"get","params":{"id":[1]}}"#, 16).unwrap_err();
        assert!(
            e.message.starts_with("id: must be a single value"),
            "{}",
            e.message
        );
        let r = parse_request_line(br#"{"id":5,"method":"replace","params":{"rules":[]}}"#, 16)
            .unwrap();
        assert_eq!(r.rules_text.as_deref(), Some("[]"));
    }

    /// The fuzz target's second find: a number out of f64's range inside a
    /// batch is skipped by the envelope reader; the line is answered as
    /// the value path answers it (not JSON), not as a batch with one bad
    /// update.
    #[test]
    fn a_small_line_that_is_not_json_is_answered_as_such() {
        let line = br#"{"id":4,"method":"apply","params":{"updates":[{"op":"insert","rule":{"id":2,"match":{"dst_prefix":"10.0.0.0/8"},"action":{"redirect":4e00000009998000180000182}}}]}}"#;
        let e = parse_request_line(line, 16).unwrap_err();
        assert_eq!(e.code, code::PARSE_ERROR, "{e:?}");
        assert_eq!(Err(e), parse_request(line).map(|_| ()));
        // Unknown parameter whose value is skipped: the same.
        let line = br#"{"id":1,"method":"ping","params":{"x":1e99999}}"#;
        assert_eq!(
            parse_request_line(line, 16).unwrap_err().code,
            code::PARSE_ERROR
        );
    }

    #[test]
    fn good_requests_parse() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert_eq!(
            (r.id, r.method, r.params),
            (json!(7), Method::Ping, json!({}))
        );
        let r = parse_request(br#"{"id":"a","method":"get","params":{"id":3}}"#).unwrap();
        assert_eq!(r.params["id"], 3);
    }

    #[test]
    fn bad_requests_carry_the_id_back_when_readable() {
        let e = parse_request(b"{not json").unwrap_err();
        assert_eq!((e.code, e.id), (code::PARSE_ERROR, Value::Null));
        let e = parse_request(br#"{"id":5,"method":"reboot"}"#).unwrap_err();
        assert_eq!((e.code, e.id), (code::METHOD_NOT_FOUND, json!(5)));
        let e = parse_request(br#"{"id":5,"method":"ping","params":[1]}"#).unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        let e = parse_request(br#"{"id":5,"method":"ping","extra":1}"#).unwrap_err();
        assert_eq!((e.code, e.id), (code::INVALID_REQUEST, json!(5)));
        let e = parse_request(br#"{"id":[1],"method":"ping"}"#).unwrap_err();
        assert_eq!(e.code, code::INVALID_REQUEST);
        let e = parse_request(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).unwrap_err();
        assert_eq!(e.code, code::INVALID_REQUEST);
        assert!(e.to_json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2.0"));
    }

    #[test]
    fn params_are_checked() {
        assert!(check_params(&json!({"a": 1}), &["a"]).is_ok());
        assert_eq!(
            check_params(&json!({"b": 1}), &["a"]).unwrap_err(),
            ParamError::Unknown {
                name: "b".into(),
                allowed: "a".into()
            }
        );
        assert_eq!(
            check_params(&json!({"b": 1}), &[]).unwrap_err().to_string(),
            "b: unknown parameter (this method takes none)"
        );
        assert_eq!(param_u64(&json!({"n": 4}), "n"), Ok(Some(4)));
        assert!(param_u64(&json!({"n": -4}), "n").is_err());
    }

    /// The line parser with its batch fast path answers exactly as
    /// `parse_request` + `parse_batch` do, for good and bad envelopes.
    #[test]
    fn request_lines_parse_like_the_value_path() {
        let batch = r#"{"updates": [{"op": "delete", "id": 3}, {"op": "insert", "rule": {"id": 4, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}}]}"#;
        let lines = [
            format!(r#"{{"jsonrpc": "2.0", "id": 1, "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"id": "a", "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"id": null, "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"id": [1], "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"jsonrpc": "1.0", "id": 1, "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"id": 1, "method": "apply", "params": {batch}, "x": 1}}"#),
            format!(r#"{{"id": 1, "method": "appl\u0079", "params": {batch}}}"#),
            format!(r#"{{"id": 1, "id": 2, "method": "apply", "params": {batch}}}"#),
            format!(r#"{{"id": 1.5, "method": "apply", "params": {batch}}}"#),
            r#" {"method":"apply","params":{"atomicity":"dataplane_atomic","expected_generation":5,"updates":[ ]},"id":9} "#.to_string(),
            r#"{"id": 1, "method": "apply", "params": {"expected_generation": 05, "updates": []}}"#.to_string(),
            r#"{"id": 1, "method": "apply", "params": {"atomicity": "sometimes", "updates": []}}"#.to_string(),
            r#"{"id": 1, "method": "apply", "params": [1]}"#.to_string(),
            r#"{"id": 1, "method": "apply", "params": null}"#.to_string(),
            r#"{"id": 1, "method": "apply"}"#.to_string(),
            r#"{"id": 1, "method": "stats", "params": {}}"#.to_string(),
            r#"{"id": 1, "method": "get", "params": {"id": 4}}"#.to_string(),
            r#"{"id": 1, "method": "nope"}"#.to_string(),
            r#"{"id": 1}"#.to_string(),
            "[]".to_string(),
            "{".to_string(),
        ];
        for line in &lines {
            let slow = parse_request(line.as_bytes());
            let fast = parse_request_line(line.as_bytes(), 100);
            match (fast, slow) {
                (Ok(f), Ok(s)) => {
                    assert_eq!((&f.req.id, f.req.method), (&s.id, s.method), "{line}");
                    let want =
                        (s.method == Method::Apply).then(|| crate::parse_batch(&s.params, 100));
                    match (f.batch, want) {
                        (Some(fb), Some(sb)) => {
                            let key = |b: &crate::Batch| {
                                (b.atomicity, b.expected_generation, b.updates.clone())
                            };
                            assert_eq!(fb.as_ref().map(key), sb.as_ref().map(key), "{line}");
                        }
                        (None, None) => assert_eq!(f.req.params, s.params, "{line}"),
                        (None, Some(sb)) => {
                            // Slow path taken: the plane parses params.
                            assert_eq!(f.req.params, s.params, "{line}");
                            let _ = sb;
                        }
                        (Some(_), None) => panic!("a batch for a non-apply request: {line}"),
                    }
                }
                (Err(f), Err(s)) => assert_eq!(f, s, "{line}"),
                (f, s) => panic!("{line}: fast {f:?} vs slow {s:?}"),
            }
        }
        // The usual spelling takes the fast path, and the updates' text it
        // keeps reads back as the same updates.
        for line in &lines[..3] {
            let p = parse_request_line(line.as_bytes(), 100).unwrap();
            let batch = p.batch.expect("fast path").expect("valid");
            let text = p.updates_text.expect("the updates' text");
            let v: Value = serde_json::from_str(&text).unwrap();
            let again: Vec<_> = v
                .as_array()
                .unwrap()
                .iter()
                .map(crate::parse_update)
                .collect();
            assert_eq!(again, batch.updates, "{line}");
        }
    }
}
