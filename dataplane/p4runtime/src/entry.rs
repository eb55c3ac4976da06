//! Table entries and cfdp rules, both ways. Parsing only: which entries
//! exist is the rule store's business (`service` asks it).
//!
//! An entry of `acl`/`acl6` is a cfdp multi-field rule: a ternary address
//! match is a prefix (its mask must be one, or the entry is refused naming
//! the field: cfdp never widens a match), `ip_proto` is exact (mask all
//! ones), the port ranges are ranges, and an absent field is a wildcard.
//! Values arrive in P4Runtime's binary form, big-endian, with or without
//! leading zero bytes; cfdp answers in the canonical form (no leading
//! zeros, one byte for zero).

use cfdp_rules::rule::MAX_PRIORITY;
use cfdp_rules::{Action, Allowing, IpPrefix, Match, Raw, RawMatch, RawPort, RawProto, Rule};
use prost::bytes::Bytes;

use crate::pipeline::{self, Table, DPORT, DST, PROTO, SPORT, SRC};
use crate::proto::p4::v1 as p4;
use p4::field_match::FieldMatchType as Fm;

/// The kind of refusal, which the service answers with a status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// INVALID_ARGUMENT: the entry is malformed or cfdp cannot match it
    /// exactly.
    InvalidArgument,
    /// UNIMPLEMENTED: valid P4Runtime that cfdp does not keep.
    Unimplemented,
    /// NOT_FOUND: no such table or action in cfdp's pipeline.
    NotFound,
}

/// Why an entry cannot be a cfdp rule: the kind of refusal, and a message
/// naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct EntryError {
    pub code: Code,
    pub field: String,
    pub message: String,
}

impl EntryError {
    fn new(code: Code, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            field: field.into(),
            message: message.into(),
        }
    }

    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, field, message)
    }
}

/// The table of an entry.
pub fn table_of(e: &p4::TableEntry) -> Result<Table, EntryError> {
    Table::of_id(e.table_id).ok_or_else(|| {
        EntryError::new(
            Code::NotFound,
            "table_id",
            format!(
                "{:#x} is not a table of cfdp's pipeline (acl, acl6)",
                e.table_id
            ),
        )
    })
}

/// The match of an entry, priority included: what names the rule.
pub fn entry_match(e: &p4::TableEntry) -> Result<Match, EntryError> {
    let t = table_of(e)?;
    if e.is_default_action {
        return Err(EntryError::new(
            Code::Unimplemented,
            "is_default_action",
            "cfdp's tables have no default action to set (a packet no rule matches is forwarded)",
        ));
    }
    let priority = u32::try_from(e.priority)
        .ok()
        .filter(|p| (1..=MAX_PRIORITY).contains(p))
        .ok_or_else(|| {
            EntryError::invalid(
                "priority",
                format!(
                    "{}: entries of {} need a priority of 1 or more",
                    e.priority,
                    t.name()
                ),
            )
        })?;
    // The entry in the raw form every rule reader builds; the one
    // validator turns it into the match (an absent address is any).
    let mut m = RawMatch {
        src_prefix: Some(Raw::Value(IpPrefix::any(t.v6()))),
        dst_prefix: Some(Raw::Value(IpPrefix::any(t.v6()))),
        ..RawMatch::empty()
    };
    let mut seen = [false; 6];
    for f in &e.r#match {
        let name = t.field_name(f.field_id);
        let Some(slot) = seen
            .get_mut(f.field_id as usize)
            .filter(|_| f.field_id != 0)
        else {
            return Err(EntryError::invalid(
                "match",
                format!(
                    "field id {} is not a match field of {}",
                    f.field_id,
                    t.name()
                ),
            ));
        };
        if std::mem::replace(slot, true) {
            return Err(EntryError::invalid(name, "given twice"));
        }
        let p = |x: &p4::field_match::Ternary| prefix(t, name, &x.value, &x.mask).map(Raw::Value);
        match (f.field_id, &f.field_match_type) {
            (SRC, Some(Fm::Ternary(x))) => m.src_prefix = Some(p(x)?),
            (DST, Some(Fm::Ternary(x))) => m.dst_prefix = Some(p(x)?),
            (PROTO, Some(Fm::Ternary(x))) => {
                m.proto = Some(RawProto::Number(protocol(name, &x.value, &x.mask)?));
            }
            (SPORT, Some(Fm::Range(r))) => m.sport = Some(range(name, &r.low, &r.high)?),
            (DPORT, Some(Fm::Range(r))) => m.dport = Some(range(name, &r.low, &r.high)?),
            (SRC | DST | PROTO, _) => return Err(EntryError::invalid(name, "a ternary match")),
            _ => return Err(EntryError::invalid(name, "a range match")),
        }
    }
    // Both prefixes come from one table, so of one family (ports are taken
    // with any protocol, as rte_acl takes them: see `AclMatch::new`).
    m.validate(Some(priority)).map_err(|e| {
        let field = match e.field.as_str() {
            "match.src_prefix" => t.field_name(SRC),
            "match.proto" => t.field_name(PROTO),
            "match.sport" => t.field_name(SPORT),
            "match.dport" => t.field_name(DPORT),
            _ => t.field_name(DST),
        };
        EntryError::invalid(field, e.message)
    })
}

/// The action of an entry.
pub fn entry_action(e: &p4::TableEntry) -> Result<Action, EntryError> {
    let unimplemented = |field: &str, what: &str| {
        Err(EntryError::new(
            Code::Unimplemented,
            field,
            what.to_string(),
        ))
    };
    if e.controller_metadata != 0 || !e.metadata.is_empty() {
        return unimplemented(
            "metadata",
            "cfdp does not keep controller metadata with a rule",
        );
    }
    if e.idle_timeout_ns != 0 {
        return unimplemented("idle_timeout_ns", "cfdp's rules do not time out");
    }
    if e.counter_data
        .is_some_and(|c| c.byte_count != 0 || c.packet_count != 0)
    {
        return unimplemented("counter_data", "a rule's counters start at zero");
    }
    let a = match e.action.as_ref().and_then(|a| a.r#type.as_ref()) {
        Some(p4::table_action::Type::Action(a)) => a,
        Some(_) => return unimplemented("action", "cfdp's tables have no action profiles"),
        None => return Err(EntryError::invalid("action", "an entry needs an action")),
    };
    let no_params = |action: Action| {
        if a.params.is_empty() {
            Ok(action)
        } else {
            Err(EntryError::invalid(
                "action.params",
                format!("{} takes none", action.name()),
            ))
        }
    };
    match a.action_id {
        pipeline::DROP => no_params(Action::Drop),
        pipeline::ALLOW => no_params(Action::Allow),
        pipeline::COUNT => no_params(Action::Count),
        pipeline::ALLOW_TRACKED => no_params(Action::Track(Allowing::Allow)),
        pipeline::COUNT_TRACKED => no_params(Action::Track(Allowing::Count)),
        id @ (pipeline::REDIRECT | pipeline::REDIRECT_TRACKED) => match a.params.as_slice() {
            [p] if p.param_id == pipeline::REDIRECT_PORT => {
                let port = value("action.port", &p.value, 2)?;
                let port = u16::from_be_bytes([port[0], port[1]]);
                Ok(if id == pipeline::REDIRECT {
                    Action::Redirect(port)
                } else {
                    Action::Track(Allowing::Redirect(port))
                })
            }
            _ => Err(EntryError::invalid(
                "action.params",
                "redirect takes one: port (id 1)",
            )),
        },
        id => Err(EntryError::new(
            Code::NotFound,
            "action.action_id",
            format!("{id:#x} is not an action of cfdp's pipeline"),
        )),
    }
}

/// A value of `bytes` bytes from P4Runtime's binary form (leading zero
/// bytes may be left out or kept; a wider value is refused), right-aligned
/// in the first `bytes` bytes of the array (an array, not a `Vec`: a
/// 1024-entry Write reads ~4000 values).
fn value(field: &str, v: &[u8], bytes: usize) -> Result<[u8; 16], EntryError> {
    let first = v.iter().position(|&b| b != 0).unwrap_or(v.len());
    let digits = &v[first..];
    if v.is_empty() {
        return Err(EntryError::invalid(field, "an empty value"));
    }
    if digits.len() > bytes {
        return Err(EntryError::invalid(
            field,
            format!("wider than {} bits", bytes * 8),
        ));
    }
    let mut out = [0; 16];
    out[bytes - digits.len()..bytes].copy_from_slice(digits);
    Ok(out)
}

/// P4Runtime's canonical form of a big-endian value.
pub fn canonical(v: &[u8]) -> Bytes {
    let first = v
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(v.len().saturating_sub(1));
    Bytes::copy_from_slice(&v[first..])
}

fn prefix(t: Table, field: &str, v: &[u8], mask: &[u8]) -> Result<IpPrefix, EntryError> {
    let n = t.addr_bits() as usize / 8;
    let (v, mask) = (value(field, v, n)?, value(field, mask, n)?);
    let len: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let addr = v;
    let as_prefix = IpPrefix::mask(t.v6(), &[0xff; 16], len as u8);
    if len == 0 {
        return Err(EntryError::invalid(
            field,
            "a mask of zeros: leave the field out for any address (P4Runtime's don't-care)",
        ));
    }
    if as_prefix != mask {
        return Err(EntryError::invalid(
            field,
            "the mask is not a prefix (ones, then zeros): cfdp matches addresses by prefix",
        ));
    }
    IpPrefix::new(t.v6(), addr, len as u8)
        .map_err(|_| EntryError::invalid(field, "the value has bits set outside its mask"))
}

fn protocol(field: &str, v: &[u8], mask: &[u8]) -> Result<u8, EntryError> {
    let (v, mask) = (value(field, v, 1)?, value(field, mask, 1)?);
    match mask[0] {
        0xff => Ok(v[0]),
        0 => Err(EntryError::invalid(
            field,
            "a mask of zeros: leave the field out for any protocol (P4Runtime's don't-care)",
        )),
        _ => Err(EntryError::invalid(
            field,
            "cfdp matches one protocol or any: the mask must be 0xff",
        )),
    }
}

/// A range match as the raw form takes it (the validator refuses a low
/// above the high); the whole range is P4Runtime's don't-care, refused.
fn range(field: &str, lo: &[u8], hi: &[u8]) -> Result<RawPort<'static>, EntryError> {
    let port = |v: &[u8]| value(field, v, 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let (lo, hi) = (port(lo)?, port(hi)?);
    if (lo, hi) == (0, u16::MAX) {
        return Err(EntryError::invalid(
            field,
            "0..65535: leave the field out for any port (P4Runtime's don't-care)",
        ));
    }
    Ok(RawPort::Range(lo, hi))
}

/// The entry of a cfdp rule, when it is one of the tables' (a
/// multi-field rule; exact flows and single-prefix rules are not).
pub fn rule_entry(r: &Rule) -> Option<p4::TableEntry> {
    let Match::Acl { m, priority } = r.matcher else {
        return None;
    };
    let t = if m.v6() { Table::Acl6 } else { Table::Acl };
    let n = t.addr_bits() as usize / 8;
    let mut fields = Vec::new();
    let ternary = |id, value: &[u8], mask: &[u8]| p4::FieldMatch {
        field_id: id,
        field_match_type: Some(Fm::Ternary(p4::field_match::Ternary {
            value: canonical(value),
            mask: canonical(mask),
        })),
    };
    for (id, p) in [(SRC, m.src()), (DST, m.dst())] {
        if p.len() > 0 {
            let mask = IpPrefix::mask(t.v6(), &[0xff; 16], p.len());
            fields.push(ternary(id, &p.addr()[..n], &mask[..n]));
        }
    }
    if let Some(p) = m.proto() {
        fields.push(ternary(PROTO, &[p], &[0xff]));
    }
    for (id, r) in [(SPORT, m.sport()), (DPORT, m.dport())] {
        if !r.is_any() {
            fields.push(p4::FieldMatch {
                field_id: id,
                field_match_type: Some(Fm::Range(p4::field_match::Range {
                    low: canonical(&r.lo().to_be_bytes()),
                    high: canonical(&r.hi().to_be_bytes()),
                })),
            });
        }
    }
    let port = |port: u16| {
        vec![p4::action::Param {
            param_id: pipeline::REDIRECT_PORT,
            value: canonical(&port.to_be_bytes()),
        }]
    };
    let (action_id, params) = match r.action {
        Action::Drop => (pipeline::DROP, vec![]),
        Action::Allow => (pipeline::ALLOW, vec![]),
        Action::Count => (pipeline::COUNT, vec![]),
        Action::Redirect(p) => (pipeline::REDIRECT, port(p)),
        Action::Track(Allowing::Allow) => (pipeline::ALLOW_TRACKED, vec![]),
        Action::Track(Allowing::Count) => (pipeline::COUNT_TRACKED, vec![]),
        Action::Track(Allowing::Redirect(p)) => (pipeline::REDIRECT_TRACKED, port(p)),
    };
    Some(p4::TableEntry {
        table_id: t.id(),
        r#match: fields,
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id,
                params,
            })),
        }),
        priority: i32::try_from(priority).unwrap_or(i32::MAX),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::PortRange;
    use p4::field_match::{Range, Ternary};

    fn t(id: u32, value: &[u8], mask: &[u8]) -> p4::FieldMatch {
        p4::FieldMatch {
            field_id: id,
            field_match_type: Some(Fm::Ternary(Ternary {
                value: Bytes::copy_from_slice(value),
                mask: Bytes::copy_from_slice(mask),
            })),
        }
    }

    fn r(id: u32, low: &[u8], high: &[u8]) -> p4::FieldMatch {
        p4::FieldMatch {
            field_id: id,
            field_match_type: Some(Fm::Range(Range {
                low: Bytes::copy_from_slice(low),
                high: Bytes::copy_from_slice(high),
            })),
        }
    }

    fn entry(table_id: u32, priority: i32, fields: Vec<p4::FieldMatch>) -> p4::TableEntry {
        p4::TableEntry {
            table_id,
            r#match: fields,
            priority,
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: pipeline::REDIRECT,
                    params: vec![p4::action::Param {
                        param_id: pipeline::REDIRECT_PORT,
                        value: Bytes::from_static(&[0, 2]),
                    }],
                })),
            }),
            ..Default::default()
        }
    }

    fn err(e: &p4::TableEntry) -> EntryError {
        entry_match(e).unwrap_err()
    }

    #[test]
    fn an_entry_is_a_rule_and_back_in_canonical_form() {
        // Padded and canonical values are the same match.
        let padded = entry(
            pipeline::ACL,
            9,
            vec![
                t(SRC, &[10, 1, 0, 0], &[255, 255, 0, 0]),
                t(PROTO, &[0, 6], &[0xff]),
                r(DPORT, &[0, 80], &[1, 0]),
            ],
        );
        let m = entry_match(&padded).unwrap();
        let Match::Acl { m: acl, priority } = m else {
            panic!("{m:?}")
        };
        assert_eq!(priority, 9);
        assert_eq!(acl.src().to_string(), "10.1.0.0/16");
        assert_eq!(acl.dst().len(), 0);
        assert_eq!(acl.proto(), Some(6));
        assert_eq!(acl.dport(), PortRange::new(80, 256).unwrap());
        assert!(acl.sport().is_any());
        let action = entry_action(&padded).unwrap();
        assert_eq!(action, Action::Redirect(2));
        let back = rule_entry(&Rule {
            id: 1,
            matcher: m,
            action,
        })
        .unwrap();
        assert_eq!(back.r#match[1], t(PROTO, &[6], &[0xff]));
        assert_eq!(back.r#match[2], r(DPORT, &[80], &[1, 0]));
        assert_eq!(entry_match(&back), Ok(m));
        assert_eq!(entry_action(&back), Ok(action));
        // Every action, stateful or not, is an action of the pipeline and
        // comes back as itself.
        for action in [
            Action::Drop,
            Action::Allow,
            Action::Count,
            Action::Redirect(7),
            Action::Track(Allowing::Allow),
            Action::Track(Allowing::Count),
            Action::Track(Allowing::Redirect(7)),
        ] {
            let e = rule_entry(&Rule {
                id: 1,
                matcher: m,
                action,
            })
            .unwrap();
            assert_eq!(entry_action(&e), Ok(action));
            let id = match e.action.and_then(|a| a.r#type) {
                Some(p4::table_action::Type::Action(a)) => a.action_id,
                other => panic!("{other:?}"),
            };
            assert!(crate::pipeline::p4info()
                .actions
                .iter()
                .any(|a| { a.preamble.as_ref().is_some_and(|p| p.id == id) }));
        }
    }

    #[test]
    fn ipv6_entries_go_to_acl6() {
        let mut v = [0u8; 16];
        v[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut mask = [0u8; 16];
        mask[..4].fill(0xff);
        let e = entry(pipeline::ACL6, 1, vec![t(DST, &v, &mask)]);
        let m = entry_match(&e).unwrap();
        let Match::Acl { m: acl, .. } = m else {
            panic!()
        };
        assert!(acl.v6() && acl.dst().v6());
        assert_eq!(acl.dst().to_string(), "2001:db8::/32");
        let rule = Rule {
            id: 3,
            matcher: m,
            action: Action::Drop,
        };
        assert_eq!(rule_entry(&rule).unwrap().table_id, pipeline::ACL6);
    }

    #[test]
    #[allow(clippy::too_many_lines)] // a table of cases
    fn what_cfdp_cannot_match_is_refused_naming_the_field() {
        let cases: Vec<(p4::TableEntry, &str, &str)> = vec![
            (
                entry(
                    pipeline::ACL,
                    1,
                    vec![t(SRC, &[10, 0, 0, 0], &[255, 0, 255, 0])],
                ),
                "ipv4_src",
                "not a prefix",
            ),
            (
                entry(
                    pipeline::ACL,
                    1,
                    vec![t(DST, &[10, 0, 0, 1], &[255, 0, 0, 0])],
                ),
                "ipv4_dst",
                "outside its mask",
            ),
            (
                entry(pipeline::ACL, 1, vec![t(DST, &[0], &[0])]),
                "ipv4_dst",
                "zeros",
            ),
            (
                entry(pipeline::ACL, 1, vec![t(DST, &[1, 10, 0, 0, 0], &[255])]),
                "ipv4_dst",
                "wider than 32",
            ),
            (
                entry(pipeline::ACL, 1, vec![t(PROTO, &[6], &[0xf0])]),
                "ip_proto",
                "0xff",
            ),
            (
                entry(pipeline::ACL, 1, vec![r(SPORT, &[9], &[8])]),
                "l4_sport",
                "above",
            ),
            (
                entry(pipeline::ACL, 1, vec![r(SPORT, &[0], &[0xff, 0xff])]),
                "l4_sport",
                "don't-care",
            ),
            (
                entry(pipeline::ACL, 1, vec![t(SPORT, &[1], &[1])]),
                "l4_sport",
                "a range match",
            ),
            (
                entry(pipeline::ACL, 1, vec![r(SRC, &[1], &[1])]),
                "ipv4_src",
                "a ternary match",
            ),
            (
                entry(
                    pipeline::ACL,
                    1,
                    vec![
                        t(SRC, &[10, 0, 0, 0], &[255, 0, 0, 0]),
                        t(SRC, &[10, 0, 0, 0], &[255, 0, 0, 0]),
                    ],
                ),
                "ipv4_src",
                "twice",
            ),
            (
                entry(pipeline::ACL, 1, vec![t(9, &[1], &[1])]),
                "match",
                "field id 9",
            ),
            (entry(pipeline::ACL, 0, vec![]), "priority", "1 or more"),
            (entry(pipeline::ACL, -4, vec![]), "priority", "1 or more"),
            (entry(77, 1, vec![]), "table_id", "not a table"),
        ];
        for (e, field, says) in cases {
            let x = err(&e);
            assert_eq!(x.field, field, "{x}");
            assert!(x.message.contains(says), "{x}");
        }
        assert_eq!(err(&entry(77, 1, vec![])).code, Code::NotFound);
    }

    #[test]
    fn actions_and_what_cfdp_does_not_keep() {
        let mut e = entry(pipeline::ACL, 1, vec![]);
        e.metadata = Bytes::from_static(&[1]);
        assert_eq!(entry_action(&e).unwrap_err().code, Code::Unimplemented);
        let mut e = entry(pipeline::ACL, 1, vec![]);
        e.action = None;
        assert_eq!(entry_action(&e).unwrap_err().field, "action");
        e.action = Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: pipeline::DROP,
                params: vec![p4::action::Param {
                    param_id: 1,
                    value: Bytes::from_static(&[1]),
                }],
            })),
        });
        assert_eq!(entry_action(&e).unwrap_err().field, "action.params");
        let mut e = entry(pipeline::ACL, 1, vec![]);
        e.is_default_action = true;
        assert_eq!(entry_match(&e).unwrap_err().code, Code::Unimplemented);
    }

    #[test]
    fn canonical_values_drop_leading_zeros_and_keep_one_for_zero() {
        assert_eq!(canonical(&[0, 0, 7, 0])[..], [7, 0]);
        assert_eq!(canonical(&[0, 0])[..], [0]);
        assert_eq!(canonical(&[0x80])[..], [0x80]);
    }
}
