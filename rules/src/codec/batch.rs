//! The JSON value form of updates and batches (the control protocol's
//! `apply` parameters): [`parse_update`] and [`parse_batch`], each error
//! naming its field. The fast path (`fast`) takes the common spellings
//! first and hands the rest here.

use serde_json::Value;

use crate::batch::{batch_err, too_many, Atomicity, Batch, BatchError, Update, UpdateError};
use crate::codec::json::parse_rule;
use crate::rule::RuleId;

/// Parses one update object: `{"op": "insert"|"modify", "rule": {...}}` or
/// `{"op": "delete", "id": N}`. The error names the field.
pub fn parse_update(v: &Value) -> Result<Update, UpdateError> {
    let obj = v.as_object().ok_or(UpdateError::NotAnObject)?;
    let op = obj
        .get("op")
        .and_then(Value::as_str)
        .ok_or(UpdateError::NoOp)?;
    let allowed: &[&str] = match op {
        "insert" | "modify" => &["op", "rule"],
        "delete" => &["op", "id"],
        _ => return Err(UpdateError::UnknownOp(op.to_string())),
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        let op = match op {
            "insert" => "insert",
            "modify" => "modify",
            _ => "delete",
        };
        return Err(UpdateError::UnknownField {
            field: k.clone(),
            op,
        });
    }
    match op {
        "delete" => {
            let id = obj
                .get("id")
                .ok_or(UpdateError::NoId)?
                .as_u64()
                .and_then(|n| RuleId::try_from(n).ok())
                .ok_or(UpdateError::BadId)?;
            Ok(Update::Delete(id))
        }
        _ => {
            let r = obj.get("rule").ok_or(UpdateError::NoRule)?;
            let rule = parse_rule(r, None).map_err(|e| UpdateError::Rule(Box::new(e)))?;
            Ok(if op == "insert" {
                Update::Insert(rule)
            } else {
                Update::Modify(rule)
            })
        }
    }
}

/// Parses the parameters of an `apply` request. At most `max_updates`
/// updates are accepted (a larger batch is refused whole).
pub fn parse_batch(v: &Value, max_updates: usize) -> Result<Batch, BatchError> {
    let obj = v
        .as_object()
        .ok_or_else(|| batch_err("", "a batch is an object {\"updates\": [...]}"))?;
    const FIELDS: [&str; 3] = ["atomicity", "expected_generation", "updates"];
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(batch_err(
            k,
            "unknown field (atomicity, expected_generation, updates)",
        ));
    }
    let atomicity = match obj.get("atomicity") {
        None => Atomicity::default(),
        Some(a) => a.as_str().and_then(Atomicity::parse).ok_or_else(|| {
            batch_err(
                "atomicity",
                format!("{a} is not continue_on_error, rollback_on_error or dataplane_atomic"),
            )
        })?,
    };
    let expected_generation = match obj.get("expected_generation") {
        None | Some(Value::Null) => None,
        Some(g) => Some(
            g.as_u64()
                .ok_or_else(|| batch_err("expected_generation", "not a non-negative integer"))?,
        ),
    };
    let list = obj
        .get("updates")
        .and_then(Value::as_array)
        .ok_or_else(|| batch_err("updates", "missing or not a list"))?;
    if list.len() > max_updates {
        return Err(too_many(list.len(), max_updates));
    }
    Ok(Batch {
        atomicity,
        expected_generation,
        updates: list.iter().map(parse_update).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_updates_stay_in_place() {
        let b = parse_batch(
            &json!({"atomicity": "continue_on_error", "updates": [
                {"op": "delete", "id": 3},
                {"op": "insert", "rule": {"id": 1, "match": {"dst_prefix": "10.0.0.0/33"}, "action": "drop"}},
                {"op": "frobnicate"},
                {"op": "modify", "rule": {"id": 2, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"}}
            ]}),
            10,
        )
        .unwrap();
        assert_eq!(b.atomicity, Atomicity::ContinueOnError);
        assert_eq!(b.updates[0], Ok(Update::Delete(3)));
        let e1 = b.updates[1].as_ref().unwrap_err();
        assert!(
            matches!(e1, UpdateError::Rule(r) if r.field == "match.dst_prefix"),
            "{e1}"
        );
        assert!(
            e1.to_string().starts_with("rule.match.dst_prefix: "),
            "{e1}"
        );
        assert_eq!(
            b.updates[2],
            Err(UpdateError::UnknownOp("frobnicate".into()))
        );
        assert!(matches!(b.updates[3], Ok(Update::Modify(_))));
    }

    #[test]
    fn batch_level_errors_refuse_the_whole_batch() {
        let too_many = json!({"updates": [{"op": "delete", "id": 1}, {"op": "delete", "id": 2}]});
        assert_eq!(parse_batch(&too_many, 1).unwrap_err().field, "updates");
        let bad_mode = json!({"atomicity": "sometimes", "updates": []});
        assert_eq!(parse_batch(&bad_mode, 9).unwrap_err().field, "atomicity");
        let unknown = json!({"updates": [], "force": true});
        assert_eq!(parse_batch(&unknown, 9).unwrap_err().field, "force");
        assert!(parse_batch(&json!([1]), 9).is_err());
    }

    #[test]
    fn updates_round_trip_through_json() {
        let b = parse_batch(
            &json!({"updates": [
                {"op": "insert", "rule": {"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": {"redirect": 3}}},
                {"op": "delete", "id": 9}
            ]}),
            9,
        )
        .unwrap();
        for u in b.updates {
            let u = u.unwrap();
            assert_eq!(parse_update(&u.to_json()).unwrap(), u);
        }
    }
}
