//! The typed fast path for rules and batches: straight from JSON text into
//! [`Rule`]s and [`Update`]s, with no JSON tree.
//!
//! Building a `serde_json::Value` per rule (a map per object, a string per
//! key and value) was most of the cost of reading a rule file or a
//! 1024-rule batch. Here each element is deserialized into borrowed,
//! typed shapes and validated with the same checks. The fast path only
//! *accepts*: any element it does not take as valid — an unusual spelling
//! (escaped strings, `null` for an optional field, duplicate keys) or an
//! invalid rule — goes to the JSON-value parser (`parse_rule`,
//! `parse_update`, `parse_batch`), which gives the answer and the error
//! message. A test checks that whatever the fast path accepts, the value
//! parser accepts with the same result.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::batch::{Atomicity, Batch, BatchError, Update, UpdateError};
use crate::codec::batch::{parse_batch, parse_update};
use crate::codec::json::parse_rule;
use crate::codec::shape::{present, RawRule, UpdateShape};
use crate::codec::validate;
use crate::rule::{Rule, RuleError};

/// The rule in `text` if it is valid and in the fast path's spelling.
pub(crate) fn rule(text: &str) -> Option<Rule> {
    // The plain spelling byte by byte; anything else through serde. Both
    // build the same shape, and `checked` decides.
    match crate::codec::strict::rule(text) {
        Some(r) => checked(r),
        None => checked(serde_json::from_str(text).ok()?),
    }
}

/// The rule a typed shape spells, if it is valid (the value parser's
/// validator; any problem sends the text to the value parser, which names
/// it).
fn checked(r: RawRule) -> Option<Rule> {
    validate::rule(r).ok()
}

/// Parses one rule from its JSON text: the fast path, else the value parser
/// (which names the problem).
pub fn parse_rule_text(text: &str, index: Option<usize>) -> Result<Rule, RuleError> {
    if let Some(r) = rule(text) {
        return Ok(r);
    }
    let v: Value = serde_json::from_str(text)
        .map_err(|e| RuleError::new(index, None, "", format!("not valid JSON: {e}")))?;
    parse_rule(&v, index)
}

/// Parses one update from its JSON text, like [`parse_update`].
pub fn parse_update_text(text: &str) -> Result<Update, UpdateError> {
    if let Some(u) = serde_json::from_str::<UpdateShape<&RawValue>>(text)
        .ok()
        .and_then(|u| u.checked(|r| rule(r.get())))
    {
        return Ok(u);
    }
    let v: Value = serde_json::from_str(text).map_err(|e| UpdateError::Json(e.to_string()))?;
    parse_update(&v)
}

/// A batch's fields; `U` is the form of its updates list: raw texts per
/// update, typed updates read in the same pass, or the list's whole text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "U: Deserialize<'de>"))]
pub(crate) struct BatchShape<'a, U> {
    #[serde(default, deserialize_with = "present", borrow)]
    atomicity: Option<&'a str>,
    #[serde(default)]
    expected_generation: Option<u64>,
    updates: U,
}

impl<U> BatchShape<'_, U> {
    /// Its atomicity, if known and the batch holds at most `max_updates`
    /// (it holds `n`).
    fn atomicity(&self, n: usize, max_updates: usize) -> Option<Atomicity> {
        let atomicity = match self.atomicity {
            None => Atomicity::default(),
            Some(a) => Atomicity::parse(a)?,
        };
        (n <= max_updates).then_some(atomicity)
    }
}

/// A batch read in one typed pass.
type WholeBatch<'a> = BatchShape<'a, Vec<UpdateShape<'a, RawRule<'a>>>>;

impl WholeBatch<'_> {
    /// The batch, if every update is valid (else the caller takes the
    /// per-update path, which names each problem).
    fn checked(self, max_updates: usize) -> Option<Batch> {
        let atomicity = self.atomicity(self.updates.len(), max_updates)?;
        let updates = self
            .updates
            .into_iter()
            .map(|u| u.checked(checked).map(Ok))
            .collect::<Option<Vec<_>>>()?;
        Some(Batch {
            atomicity,
            expected_generation: self.expected_generation,
            updates,
        })
    }
}

/// The batch of a plain-spelled `apply` request (`strict::apply_request`),
/// checked as the serde fast path checks it.
pub(crate) fn plain_batch(
    p: crate::codec::strict::PlainApply<'_>,
    max_updates: usize,
) -> Option<Batch> {
    WholeBatch {
        atomicity: p.atomicity,
        expected_generation: p.expected_generation,
        updates: p.updates,
    }
    .checked(max_updates)
}

/// Parses a batch (`{"updates": [...], ...}`) from its JSON text, like
/// [`parse_batch`] on the parsed value. A batch of valid updates in the
/// usual spelling is read in one typed pass; otherwise each update is
/// parsed on its own (fast path or value parser).
pub fn parse_batch_text(text: &str, max_updates: usize) -> Result<Batch, BatchError> {
    if let Some(b) = crate::codec::strict::batch(text).and_then(
        |(atomicity, expected_generation, updates, _)| {
            WholeBatch {
                atomicity,
                expected_generation,
                updates,
            }
            .checked(max_updates)
        },
    ) {
        return Ok(b);
    }
    if let Some(b) = serde_json::from_str::<WholeBatch>(text)
        .ok()
        .and_then(|b| b.checked(max_updates))
    {
        return Ok(b);
    }
    if let Ok(b) = serde_json::from_str::<BatchShape<Vec<&RawValue>>>(text) {
        if let Some(atomicity) = b.atomicity(b.updates.len(), max_updates) {
            return Ok(Batch {
                atomicity,
                expected_generation: b.expected_generation,
                updates: b
                    .updates
                    .iter()
                    .map(|u| parse_update_text(u.get()))
                    .collect(),
            });
        }
    }
    let v: Value = serde_json::from_str(text).map_err(|e| BatchError {
        field: String::new(),
        message: format!("not valid JSON: {e}"),
    })?;
    parse_batch(&v, max_updates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Match;

    /// Every combination of these field spellings, valid and not: whatever
    /// the fast path accepts, the value parser accepts with the same rule,
    /// and the common spellings do take the fast path.
    #[test]
    #[allow(clippy::too_many_lines)] // a scenario read top to bottom
    fn the_fast_path_only_accepts_what_the_value_parser_accepts_identically() {
        let ids = [
            "1",
            "4294967295",
            "4294967296",
            "-1",
            "1.0",
            "\"1\"",
            "null",
        ];
        let addrs = [
            r#""10.0.0.1""#,
            r#""2001:db8::1""#,
            r#""10.0.0.300""#,
            r#""10.0.0.\u0031""#,
            "null",
            "7",
        ];
        let protos = [
            r#""tcp""#,
            r#""UDP""#,
            r#""icmp""#,
            "6",
            "17",
            "1",
            "300",
            "6.0",
            "-6",
            "null",
            r#""sctp""#,
            r#""t\u0063p""#,
        ];
        let ports = ["80", "0", "65535", "65536", "-1", "null", "\"80\""];
        let prefixes = [
            r#""10.0.0.0/8""#,
            r#""10.0.0.1/8""#,
            r#""2001:db8::/32""#,
            "null",
        ];
        let actions = [
            r#""drop""#,
            r#""allow""#,
            r#""count""#,
            r#""Drop""#,
            r#"{"redirect": 2}"#,
            r#"{"redirect": 0, "redirect": 1}"#,
            r#"{"redirect": 70000}"#,
            r#""reject""#,
        ];
        let mut texts = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            for (j, a) in addrs.iter().enumerate() {
                for (k, p) in protos.iter().enumerate() {
                    for (l, port) in ports.iter().enumerate() {
                        let b = addrs[(i + j) % addrs.len()];
                        let b = if (i + k) % 3 == 0 { r#""10.9.9.9""# } else { b };
                        let act = actions[(j + k + l) % actions.len()];
                        let dport = ports[(i + l) % ports.len()];
                        texts.push(format!(
                            r#"{{"id": {id}, "match": {{"flow": {{"src": {a}, "dst": {b}, "proto": {p}, "sport": {port}, "dport": {dport}}}}}, "action": {act}}}"#
                        ));
                        // Ports missing (fine for icmp, not for tcp/udp).
                        texts.push(format!(
                            r#"{{"id": {id}, "match": {{"flow": {{"src": {a}, "dst": {b}, "proto": {p}}}}}, "action": {act}}}"#
                        ));
                        let pre = prefixes[(j + l) % prefixes.len()];
                        let dir = if k % 2 == 0 {
                            "src_prefix"
                        } else {
                            "dst_prefix"
                        };
                        texts.push(format!(
                            r#"{{"id": {id}, "match": {{"{dir}": {pre}, "proto": {p}, "port": {port}}}, "action": {act}}}"#
                        ));
                        texts.push(format!(
                            r#"{{"id": {id}, "match": {{"{dir}": {pre}}}, "action": {act}}}"#
                        ));
                    }
                }
            }
        }
        // Multi-field rules (with a priority): prefixes of both families,
        // ranges spelled every way, ports with and without TCP/UDP.
        let priorities = ["1", "2147483647", "2147483648", "-1", "null", "\"5\""];
        let acl_ports = [
            "80",
            "70000",
            r#""1024-65535""#,
            r#""443""#,
            r#"" 1 - 2 ""#,
            r#""90-80""#,
            r#""x""#,
            r#""8\u0030""#,
            "null",
        ];
        let mut acl_texts = 0;
        for (i, pr) in priorities.iter().enumerate() {
            for (j, src) in prefixes.iter().enumerate() {
                for (k, p) in protos.iter().enumerate() {
                    for (l, sp) in acl_ports.iter().enumerate() {
                        let dst = prefixes[(i + j + l) % prefixes.len()];
                        let dp = acl_ports[(i + k + l) % acl_ports.len()];
                        let act = actions[(j + k) % actions.len()];
                        texts.push(format!(
                            r#"{{"id": 7, "priority": {pr}, "match": {{"src_prefix": {src}, "dst_prefix": {dst}, "proto": {p}, "sport": {sp}, "dport": {dp}}}, "action": {act}}}"#
                        ));
                        // One side only, no protocol, one range.
                        texts.push(format!(
                            r#"{{"id": 7, "priority": {pr}, "match": {{"dst_prefix": {dst}, "dport": {dp}}}, "action": {act}}}"#
                        ));
                        acl_texts += 2;
                    }
                }
            }
        }
        texts.push(
            r#"{"id": 1, "priority": 3, "match": {"proto": "tcp"}, "action": "drop"}"#.into(),
        );
        texts.push(r#"{"id": 1, "priority": 3, "match": {"dst_prefix": "10.0.0.0/8", "port": 80}, "action": "drop"}"#.into());
        texts.push(
            r#"{"id": 1, "match": {"dst_prefix": "10.0.0.0/8", "dport": 80}, "action": "drop"}"#
                .into(),
        );
        texts.push(r#"{"id": 1, "priority": 3, "priority": 4, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}"#.into());
        // Shapes the value parser refuses or reads differently.
        texts.push(
            r#"{"id": 1, "id": 2, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}"#.into(),
        );
        texts.push(r#"{"id": 1, "match": {"dst_prefix": "10.0.0.0/8", "src_prefix": "10.0.0.0/8"}, "action": "drop"}"#.into());
        texts.push(r#"{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 1}, "proto": 1}, "action": "drop"}"#.into());
        texts.push(r#"{"id": 1, "match": {}, "action": "drop"}"#.into());
        texts.push(
            r#"{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop", "x": 1}"#.into(),
        );
        texts.push(r#"[1, 2]"#.into());
        let mut fast = 0;
        let mut strict = 0;
        let mut fast_acl = 0;
        for t in &texts {
            let v: Value = serde_json::from_str(t).unwrap();
            let slow = parse_rule(&v, None);
            if let Some(r) = rule(t) {
                fast += 1;
                fast_acl += usize::from(matches!(r.matcher, Match::Acl { .. }));
                assert_eq!(slow.as_ref(), Ok(&r), "{t}");
            }
            // The byte-level reader takes only what serde reads the same.
            if let Some(r) = crate::codec::strict::rule(t) {
                strict += 1;
                let by_serde: RawRule = serde_json::from_str(t).expect("serde takes it too");
                assert_eq!(checked(r), checked(by_serde), "{t}");
            }
            // The public entry point always agrees with the value parser.
            assert_eq!(parse_rule_text(t, None), slow, "{t}");
        }
        assert!(
            fast_acl > 50 && fast_acl < acl_texts,
            "the fast path took {fast_acl} of {acl_texts} multi-field rules"
        );
        assert!(
            fast > 300 && strict > 300,
            "the fast path took only {fast} (the byte-level reader {strict}) of {}",
            texts.len()
        );
    }

    #[test]
    fn batches_and_updates_agree_with_the_value_parser() {
        let r = r#"{"id": 7, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}"#;
        let updates = [
            format!(r#"{{"op": "insert", "rule": {r}}}"#),
            format!(r#"{{"op": "modify", "rule": {r}}}"#),
            r#"{"op": "delete", "id": 7}"#.to_string(),
            r#"{"op": "delete", "id": null}"#.to_string(),
            format!(r#"{{"op": "delete", "id": 7, "rule": {r}}}"#),
            format!(r#"{{"op": "insert", "rule": {r}, "id": 7}}"#),
            r#"{"op": "insert", "rule": null}"#.to_string(),
            r#"{"op": "upsert", "id": 7}"#.to_string(),
            r#"{"id": 7}"#.to_string(),
            "7".to_string(),
        ];
        for u in &updates {
            let v: Value = serde_json::from_str(u).unwrap();
            assert_eq!(parse_update_text(u), parse_update(&v), "{u}");
        }
        // The byte-level reader reads an updates list exactly as serde does
        // (and takes the plain ones).
        let valid = updates[..3].join(", ");
        for (list, plain) in [
            (format!("[{valid}]"), true),
            (format!(" [ {valid} ] "), true),
            ("[]".to_string(), true),
            (format!("[{}]", updates.join(",")), false),
            (format!("[{valid},]"), false),
        ] {
            let by_serde: Result<Vec<UpdateShape<RawRule>>, _> = serde_json::from_str(&list);
            match crate::codec::strict::batch(&format!(r#"{{"updates": {list}}}"#)).map(|b| b.2) {
                Some(s) => {
                    let d = by_serde.expect("serde takes what the reader takes");
                    let norm = |v: Vec<UpdateShape<RawRule>>| -> Vec<Option<Update>> {
                        v.into_iter().map(|u| u.checked(checked)).collect()
                    };
                    assert_eq!(norm(s), norm(d), "{list}");
                }
                None => assert!(!plain, "the reader left a plain list to serde: {list}"),
            }
        }
        let list = updates.join(", ");
        let batches = [
            format!(r#"{{"updates": [{list}]}}"#),
            format!(
                r#"{{"atomicity": "dataplane_atomic", "expected_generation": 3, "updates": [{list}]}}"#
            ),
            format!(r#"{{"atomicity": "sometimes", "updates": [{list}]}}"#),
            format!(r#"{{"atomicity": null, "updates": [{list}]}}"#),
            format!(r#"{{"expected_generation": null, "updates": [{list}]}}"#),
            format!(r#"{{"expected_generation": -1, "updates": [{list}]}}"#),
            format!(r#"{{"updates": [{list}], "extra": 1}}"#),
            r#"{"updates": 5}"#.to_string(),
            r#"{}"#.to_string(),
        ];
        for b in &batches {
            let v: Value = serde_json::from_str(b).unwrap();
            for max in [3, 100] {
                let fast = parse_batch_text(b, max);
                let slow = parse_batch(&v, max);
                match (&fast, &slow) {
                    (Ok(f), Ok(s)) => {
                        assert_eq!(
                            (f.atomicity, f.expected_generation, &f.updates),
                            (s.atomicity, s.expected_generation, &s.updates),
                            "{b}"
                        );
                    }
                    _ => assert_eq!(fast.as_ref().err(), slow.as_ref().err(), "{b}"),
                }
            }
        }
    }
}
