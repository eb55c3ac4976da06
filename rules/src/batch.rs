//! Rule batches: the unit of change the control plane applies, modelled on
//! P4Runtime write requests.
//!
//! A batch is a list of updates (`insert`, `delete`, `modify`), applied in
//! order, with an atomicity mode that says what one failing update does to
//! the others. Parsing is split in two levels so that nothing is lost:
//!
//! * a malformed *batch* (not an object, no update list, too many updates,
//!   an unknown atomicity) is refused as a whole ([`BatchError`]);
//! * a malformed *update* inside a well-formed batch is kept in place as an
//!   `Err` and answered with `invalid_argument` at its position, like any
//!   other failing update.
//!
//! ```json
//! {"atomicity": "rollback_on_error", "expected_generation": 7,
//!  "updates": [
//!    {"op": "insert", "rule": {"id": 10, "match": {"dst_prefix": "10.1.0.0/16"}, "action": "drop"}},
//!    {"op": "modify", "rule": {"id": 3, "match": {"src_prefix": "2001:db8::/32"}, "action": "count"}},
//!    {"op": "delete", "id": 4}
//!  ]}
//! ```

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::rule::{Rule, RuleId};

/// What one failing update does to the rest of its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Atomicity {
    /// Every update is attempted and reported; the ones that succeed stay.
    ContinueOnError,
    /// Any failure undoes the whole batch.
    #[default]
    RollbackOnError,
    /// As `rollback_on_error`, and every packet sees the rule set from
    /// before or after the whole batch, never a mix.
    DataplaneAtomic,
}

impl Atomicity {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "continue_on_error" => Some(Self::ContinueOnError),
            "rollback_on_error" => Some(Self::RollbackOnError),
            "dataplane_atomic" => Some(Self::DataplaneAtomic),
            _ => None,
        }
    }

    /// Whether one failure aborts the batch.
    pub fn all_or_nothing(self) -> bool {
        self != Self::ContinueOnError
    }
}

/// One change to the rule set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// Adds a rule; its id and its match must both be new.
    Insert(Rule),
    /// Removes the rule with this id.
    Delete(RuleId),
    /// Replaces the rule with the same id (match and action may change).
    Modify(Rule),
}

impl Update {
    pub fn op(&self) -> &'static str {
        match self {
            Update::Insert(_) => "insert",
            Update::Delete(_) => "delete",
            Update::Modify(_) => "modify",
        }
    }

    pub fn id(&self) -> RuleId {
        match self {
            Update::Insert(r) | Update::Modify(r) => r.id,
            Update::Delete(id) => *id,
        }
    }

    /// The JSON form (round-trips through [`parse_update`](crate::parse_update)).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an update serializes")
    }
}

/// Updates serialize as the protocol writes them: `{"op": "insert",
/// "rule": {...}}`, `{"op": "delete", "id": N}`; streamed (the journal's
/// record format).
impl Serialize for Update {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("op", self.op())?;
        match self {
            Update::Insert(r) | Update::Modify(r) => m.serialize_entry("rule", r)?,
            Update::Delete(id) => m.serialize_entry("id", id)?,
        }
        m.end()
    }
}

/// Outcome code of one update (P4Runtime's canonical codes, narrowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    Ok,
    AlreadyExists,
    NotFound,
    InvalidArgument,
    CapacityExhausted,
    /// Not applied because another update of the batch failed.
    Aborted,
}

/// The answer for one update, in batch order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpdateResult {
    pub code: Code,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl UpdateResult {
    pub fn ok() -> Self {
        Self {
            code: Code::Ok,
            message: String::new(),
        }
    }

    pub fn err(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// A parsed batch. `updates[i]` is `Err(message)` when update `i` itself is
/// malformed (it will be answered `invalid_argument`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub atomicity: Atomicity,
    pub expected_generation: Option<u64>,
    pub updates: Vec<Result<Update, UpdateError>>,
}

/// Why a whole batch was refused before any update was looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchError {
    /// Dotted path of the offending field (empty: the batch itself).
    pub field: String,
    pub message: String,
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for BatchError {}

/// Why one update of a batch could not be read (it is answered
/// `invalid_argument` at its position); each names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    #[error("an update is an object {{\"op\": ..., ...}}")]
    NotAnObject,
    #[error("op: missing or not a string (insert, delete or modify)")]
    NoOp,
    #[error("op: unknown '{0}' (insert, delete or modify)")]
    UnknownOp(String),
    #[error("{field}: unknown field for op '{op}'")]
    UnknownField { field: String, op: &'static str },
    #[error("id: missing")]
    NoId,
    #[error("id: not an integer 0..=4294967295")]
    BadId,
    #[error("rule: missing")]
    NoRule,
    /// The rule is not one; its error names the field under `rule.`.
    #[error("rule{}{}: {}", if .0.field.is_empty() { "" } else { "." }, .0.field, .0.message)]
    Rule(Box<crate::RuleError>),
    /// The update's text is not JSON (serde's message, with its line and
    /// column).
    #[error("not valid JSON: {0}")]
    Json(String),
    /// A keyed update (P4Runtime names entries by match) whose match and
    /// priority name no rule.
    #[error("no rule has this match and priority")]
    NoMatch,
}

/// Why a `replace` rule set cannot be a rule set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    #[error("rules[{index}]: id {id} appears twice")]
    DuplicateId { index: usize, id: RuleId },
    #[error("rules[{index}] (id {id}): the same match as rule {other}")]
    DuplicateMatch {
        index: usize,
        id: RuleId,
        other: RuleId,
    },
}

/// A batch of `n` updates where at most `max` are taken.
pub fn too_many(n: usize, max: usize) -> BatchError {
    batch_err(
        "updates",
        format!("{n} updates: at most {max} per batch (split the batch)"),
    )
}

pub(crate) fn batch_err(field: &str, message: impl Into<String>) -> BatchError {
    BatchError {
        field: field.into(),
        message: message.into(),
    }
}

/// What a `replace` changes: counts by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplaceCounts {
    pub inserted: usize,
    pub modified: usize,
    pub deleted: usize,
    pub unchanged: usize,
}

/// The updates that turn `current` into `desired` (a controller's whole
/// intended rule set): deletes first, then modifies, then inserts, so every
/// match a later update needs has been freed by then — a modify whose new
/// match another modified rule still has at that point becomes a delete
/// and an insert instead. Meant for one `dataplane_atomic` batch: workers
/// see the old set or the new one. `desired` must not repeat an id or a
/// match.
pub fn replace_updates(
    current: &[Rule],
    desired: &[Rule],
) -> Result<(Vec<Update>, ReplaceCounts), ReplaceError> {
    use std::collections::HashMap;
    let mut want: HashMap<RuleId, &Rule> = HashMap::with_capacity(desired.len());
    let mut matches = HashMap::with_capacity(desired.len());
    for (i, r) in desired.iter().enumerate() {
        if want.insert(r.id, r).is_some() {
            return Err(ReplaceError::DuplicateId { index: i, id: r.id });
        }
        if let Some(other) = matches.insert(r.matcher, r.id) {
            return Err(ReplaceError::DuplicateMatch {
                index: i,
                id: r.id,
                other,
            });
        }
    }
    let have: HashMap<RuleId, &Rule> = current.iter().map(|r| (r.id, r)).collect();
    // Who holds each match once deletes and in-place modifies are done.
    let held: HashMap<crate::Match, RuleId> = current
        .iter()
        .filter(|r| want.contains_key(&r.id))
        .map(|r| (r.matcher, r.id))
        .collect();
    let mut c = ReplaceCounts::default();
    let (mut deletes, mut modifies, mut inserts) = (Vec::new(), Vec::new(), Vec::new());
    for r in current {
        if !want.contains_key(&r.id) {
            deletes.push(Update::Delete(r.id));
            c.deleted += 1;
        }
    }
    for r in desired {
        match have.get(&r.id) {
            None => {
                inserts.push(Update::Insert(*r));
                c.inserted += 1;
            }
            Some(old) if **old == *r => c.unchanged += 1,
            Some(_) => {
                c.modified += 1;
                match held.get(&r.matcher) {
                    // Another kept rule has this match until it is modified
                    // itself: take the rule out first, put it back last.
                    Some(&owner) if owner != r.id => {
                        deletes.push(Update::Delete(r.id));
                        inserts.push(Update::Insert(*r));
                    }
                    _ => modifies.push(Update::Modify(*r)),
                }
            }
        }
    }
    deletes.extend(modifies);
    deletes.extend(inserts);
    Ok((deletes, c))
}

#[cfg(test)]
mod replace_tests {
    use super::*;
    use crate::parse_rule;
    use serde_json::json;

    fn rule(id: u32, port: u16, action: &str) -> Rule {
        parse_rule(
            &json!({"id": id, "match": {"dst_prefix": "192.0.2.0/24", "proto": "udp",
                "port": port}, "action": action}),
            None,
        )
        .unwrap()
    }

    #[test]
    fn replace_gives_the_difference_in_an_order_that_applies() {
        let current = [rule(1, 1, "drop"), rule(2, 2, "drop"), rule(3, 3, "drop")];
        // 1 unchanged, 2 modified in place, 3 gone, 4 new, 5 takes... and
        // 6 takes rule 2's old match while 2 moves to a new one.
        let desired = [
            rule(1, 1, "drop"),
            rule(2, 20, "allow"),
            rule(4, 4, "drop"),
            rule(6, 2, "count"),
        ];
        let (u, c) = replace_updates(&current, &desired).unwrap();
        assert_eq!(
            c,
            ReplaceCounts {
                inserted: 2,
                modified: 1,
                deleted: 1,
                unchanged: 1
            }
        );
        let ops: Vec<(&str, u32)> = u.iter().map(|u| (u.op(), u.id())).collect();
        assert_eq!(
            ops,
            [("delete", 3), ("modify", 2), ("insert", 4), ("insert", 6)]
        );
        // Two kept rules swapping matches: one goes out and comes back.
        let current = [rule(1, 1, "drop"), rule(2, 2, "drop")];
        let desired = [rule(1, 2, "drop"), rule(2, 1, "drop")];
        let (u, _) = replace_updates(&current, &desired).unwrap();
        let ops: Vec<(&str, u32)> = u.iter().map(|u| (u.op(), u.id())).collect();
        assert_eq!(
            ops,
            [("delete", 1), ("delete", 2), ("insert", 1), ("insert", 2)]
        );
        assert_eq!(
            replace_updates(&[], &[rule(1, 1, "drop"), rule(1, 2, "drop")]).unwrap_err(),
            ReplaceError::DuplicateId { index: 1, id: 1 }
        );
        assert_eq!(
            replace_updates(&[], &[rule(1, 1, "drop"), rule(2, 1, "drop")]).unwrap_err(),
            ReplaceError::DuplicateMatch {
                index: 1,
                id: 2,
                other: 1
            }
        );
    }
}
