//! A byte-level reader for a rule in the plain spelling — the spelling
//! cfdp writes and controllers send: keys and strings without escapes,
//! unsigned integers without sign, fraction or exponent, any JSON
//! whitespace. It builds the same typed shape as the serde fast path
//! (`fast::RawRule`) and returns `None` for anything else (an escape, a
//! duplicate or unknown key, `null`, a number it does not take), which then
//! goes through serde and, failing that, the JSON-value parser that names
//! the problem.
//!
//! Why by hand: serde's derived deserializer was ~0.45 µs a rule (field
//! names matched as strings, `Option` wrappers, an element scanned twice),
//! which made reading a ten-million-rule file seconds of CPU; this reader
//! does one pass over the bytes. A test and the `rule_file` fuzz target
//! check that whatever it accepts, serde and the value parser accept with
//! the same rule.

use crate::codec::shape::{Raw, RawFlow, RawMatch, RawPort, RawProto, RawRule, UpdateShape};
use crate::rule::Action;
use serde_json::Value;

struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        let b = self.s.as_bytes();
        while self.i < b.len() && matches!(b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.as_bytes().get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let b = self.s.as_bytes();
        let start = self.i;
        loop {
            match *b.get(self.i)? {
                b'"' => {
                    // Both ends are at ASCII quotes: character boundaries.
                    let v = &self.s[start..self.i];
                    self.i += 1;
                    return Some(v);
                }
                b'\\' | 0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }

    /// An unsigned integer in plain decimal (no leading zero, sign,
    /// fraction or exponent).
    fn uint(&mut self) -> Option<u64> {
        self.ws();
        let b = self.s.as_bytes();
        let start = self.i;
        while b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let d = &b[start..self.i];
        if d.is_empty() || (d.len() > 1 && d[0] == b'0') || d.len() > 19 {
            return None;
        }
        if matches!(b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(d.iter().fold(0u64, |n, &c| n * 10 + u64::from(c - b'0')))
    }

    fn u16(&mut self) -> Option<u16> {
        u16::try_from(self.uint()?).ok()
    }

    /// `true` or `false`.
    fn boolean(&mut self) -> Option<bool> {
        self.ws();
        for (word, v) in [("true", true), ("false", false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Some(v);
            }
        }
        None
    }

    /// An object: `f` reads each key's value (and refuses unknown keys).
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let k = self.string()?;
            self.eat(b':')?;
            f(self, k)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn proto(&mut self) -> Option<RawProto<'a>> {
        match self.peek()? {
            b'"' => self.string().map(RawProto::Name),
            b'0'..=b'9' => u8::try_from(self.uint()?).ok().map(RawProto::Number),
            _ => None,
        }
    }

    fn port(&mut self) -> Option<RawPort<'a>> {
        match self.peek()? {
            b'"' => self.string().map(RawPort::Text),
            b'0'..=b'9' => self.u16().map(RawPort::Number),
            _ => None,
        }
    }

    fn flow(&mut self) -> Option<RawFlow<'a>> {
        let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
        self.object(|r, k| {
            match k {
                "src" if src.is_none() => src = Some(r.string()?),
                "dst" if dst.is_none() => dst = Some(r.string()?),
                "proto" if proto.is_none() => proto = Some(r.proto()?),
                "sport" if sport.is_none() => sport = Some(r.u16()?),
                "dport" if dport.is_none() => dport = Some(r.u16()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(RawFlow {
            src: Raw::Text(src?),
            dst: Raw::Text(dst?),
            proto: proto?,
            sport,
            dport,
        })
    }

    fn matcher(&mut self) -> Option<RawMatch<'a>> {
        let mut m = RawMatch::empty();
        self.object(|r, k| {
            match k {
                "flow" if m.flow.is_none() => m.flow = Some(r.flow()?),
                "src_prefix" if m.src_prefix.is_none() => {
                    m.src_prefix = Some(Raw::Text(r.string()?));
                }
                "dst_prefix" if m.dst_prefix.is_none() => {
                    m.dst_prefix = Some(Raw::Text(r.string()?));
                }
                "proto" if m.proto.is_none() => m.proto = Some(r.proto()?),
                "port" if m.port.is_none() => m.port = Some(r.u16()?),
                "sport" if m.sport.is_none() => m.sport = Some(r.port()?),
                "dport" if m.dport.is_none() => m.dport = Some(r.port()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(m)
    }

    fn action(&mut self) -> Option<Action> {
        if self.peek()? == b'"' {
            return match self.string()? {
                "drop" => Some(Action::Drop),
                "allow" => Some(Action::Allow),
                "count" => Some(Action::Count),
                _ => None,
            };
        }
        let mut port = None;
        self.object(|r, k| {
            if k != "redirect" || port.is_some() {
                return None;
            }
            port = Some(r.u16()?);
            Some(())
        })?;
        port.map(Action::Redirect)
    }
}

impl<'a> Reader<'a> {
    fn rule_object(&mut self) -> Option<RawRule<'a>> {
        let (mut id, mut priority, mut matcher, mut action) = (None, None, None, None);
        let mut track = None;
        self.object(|r, k| {
            match k {
                "id" if id.is_none() => id = Some(u32::try_from(r.uint()?).ok()?),
                "priority" if priority.is_none() => priority = Some(r.uint()?),
                "match" if matcher.is_none() => matcher = Some(r.matcher()?),
                "action" if action.is_none() => action = Some(r.action()?),
                "track" if track.is_none() => track = Some(r.boolean()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(RawRule {
            id: id?,
            priority,
            matcher: matcher?,
            action: action?,
            track,
        })
    }

    fn update(&mut self) -> Option<UpdateShape<'a, RawRule<'a>>> {
        let (mut op, mut rule, mut id) = (None, None, None);
        self.object(|r, k| {
            match k {
                "op" if op.is_none() => op = Some(r.string()?),
                "rule" if rule.is_none() => rule = Some(r.rule_object()?),
                "id" if id.is_none() => id = Some(u32::try_from(r.uint()?).ok()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(UpdateShape { op: op?, rule, id })
    }

    /// Nothing but whitespace left.
    fn at_end(&mut self) -> bool {
        self.ws();
        self.i == self.s.len()
    }
}

/// The rule object `text` in the plain spelling, as the serde fast path
/// would read it; `None` for anything else.
pub(crate) fn rule(text: &str) -> Option<RawRule<'_>> {
    let mut r = Reader { s: text, i: 0 };
    let rule = r.rule_object()?;
    r.at_end().then_some(rule)
}

/// A batch (`{"updates": [...], ...}`) in the plain spelling: its parts,
/// as the serde fast path would read them; `None` for anything else.
pub(crate) fn batch(text: &str) -> Option<BatchParts<'_>> {
    let mut r = Reader { s: text, i: 0 };
    let b = r.batch()?;
    r.at_end().then_some(b)
}

/// An `apply` request line in the plain spelling: its parts, and the text
/// of its `updates` list as received (what the journal records).
pub(crate) struct PlainApply<'a> {
    pub(crate) id: Value,
    pub(crate) atomicity: Option<&'a str>,
    pub(crate) expected_generation: Option<u64>,
    pub(crate) updates: Vec<UpdateShape<'a, RawRule<'a>>>,
    pub(crate) updates_text: &'a str,
}

/// The `apply` request `line` in the plain spelling (`id` a plain integer
/// or string, `jsonrpc` absent or "2.0"), as the serde fast path would read
/// it; `None` for anything else.
pub(crate) fn apply_request(line: &str) -> Option<PlainApply<'_>> {
    let mut r = Reader { s: line, i: 0 };
    let (mut jsonrpc, mut id, mut method, mut params) = (None, None, None, None);
    r.object(|r, k| {
        match k {
            "jsonrpc" if jsonrpc.is_none() => jsonrpc = Some(r.string()?),
            "id" if id.is_none() => id = Some(r.id()?),
            "method" if method.is_none() => method = Some(r.string()?),
            "params" if params.is_none() => params = Some(r.batch()?),
            _ => return None,
        }
        Some(())
    })?;
    if !r.at_end() || method? != "apply" || jsonrpc.is_some_and(|v| v != "2.0") {
        return None;
    }
    let (atomicity, expected_generation, updates, updates_text) = params?;
    Some(PlainApply {
        id: id.unwrap_or(Value::Null),
        atomicity,
        expected_generation,
        updates,
        updates_text,
    })
}

/// A batch's parts and its updates' text.
pub(crate) type BatchParts<'a> = (
    Option<&'a str>,
    Option<u64>,
    Vec<UpdateShape<'a, RawRule<'a>>>,
    &'a str,
);

impl<'a> Reader<'a> {
    fn update_list(&mut self) -> Option<Vec<UpdateShape<'a, RawRule<'a>>>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(out);
        }
        loop {
            out.push(self.update()?);
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// A request id: a plain integer or string, or `null`.
    fn id(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(|s| Value::String(s.to_owned())),
            b'0'..=b'9' => self.uint().map(Value::from),
            b'n' if self.s[self.i..].starts_with("null") => {
                self.i += 4;
                Some(Value::Null)
            }
            _ => None,
        }
    }

    fn batch(&mut self) -> Option<BatchParts<'a>> {
        let (mut atomicity, mut generation, mut updates) = (None, None, None);
        self.object(|r, k| {
            match k {
                "atomicity" if atomicity.is_none() => atomicity = Some(r.string()?),
                "expected_generation" if generation.is_none() => generation = Some(r.uint()?),
                "updates" if updates.is_none() => {
                    r.ws();
                    let start = r.i;
                    let list = r.update_list()?;
                    updates = Some((list, &r.s[start..r.i]));
                }
                _ => return None,
            }
            Some(())
        })?;
        let (list, text) = updates?;
        Some((atomicity, generation, list, text))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plain_spelling_is_read_and_the_rest_left_to_serde() {
        let taken = [
            r#"{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 53, "dport": 0}}, "action": "drop"}"#,
            " {\"action\":{\"redirect\":65535},\"match\":{\"dst_prefix\":\"10.0.0.0/8\",\"port\":80,\"proto\":6},\"id\":4294967295}\n",
            r#"{"id": 0, "match": {}, "action": "count"}"#,
            r#"{"id": 2, "track": true, "match": {}, "action": {"redirect": 3}}"#,
            r#"{"id": 2, "match": {}, "action": "drop", "track": false}"#,
        ];
        for t in taken {
            assert!(super::rule(t).is_some(), "{t}");
        }
        let left = [
            r#"{"id": 1, "id": 2, "match": {}, "action": "drop"}"#,
            r#"{"id": 01, "match": {}, "action": "drop"}"#,
            r#"{"id": 1.0, "match": {}, "action": "drop"}"#,
            r#"{"id": 1e2, "match": {}, "action": "drop"}"#,
            r#"{"id": -1, "match": {}, "action": "drop"}"#,
            r#"{"id": 4294967296, "match": {}, "action": "drop"}"#,
            r#"{"id": 1, "match": {"port": null}, "action": "drop"}"#,
            r#"{"id": 1, "match": {"dst_prefix": "10.0.0.0\/8"}, "action": "drop"}"#,
            r#"{"id": 1, "match": {}, "action": "drop", "x": 1}"#,
            r#"{"id": 1, "match": {}, "action": "redirect"}"#,
            r#"{"id": 1, "match": {}, "action": {"redirect": 1, "redirect": 2}}"#,
            r#"{"id": 1, "match": {}, "action": "drop"} x"#,
            r#"{"id": 1, "match": {}, "action": "drop",}"#,
            r#"{"id": 1, "match": {"proto": 256}, "action": "drop"}"#,
            "{\"id\": 1, \"match\": {\"dst_prefix\": \"a\tb\"}, \"action\": \"drop\"}",
            r#"{"id": 1, "match": {}}"#,
            r#"{"id": 1, "match": {}, "action": "allow", "track": 1}"#,
            r#"{"id": 1, "match": {}, "action": "allow", "track": truex}"#,
        ];
        for t in left {
            assert!(super::rule(t).is_none(), "{t}");
        }
        // Read here, refused by the validator (a dropping action cannot be
        // tracked): the fast path as a whole leaves it to the value parser.
        let invalid =
            r#"{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop", "track": true}"#;
        assert!(super::rule(invalid).is_some());
        assert!(crate::codec::fast::rule(invalid).is_none());
        let valid = invalid.replace("drop", "allow");
        assert!(crate::codec::fast::rule(&valid).is_some_and(|r| r.action.tracked().is_some()));
    }
}
