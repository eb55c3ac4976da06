//! Rules as fixed-size binary records: what `cfdp run` saves its rule set
//! in (`snapshot.bin`), so that a restart reads ten million rules without
//! parsing 1.4 GB of JSON (48 bytes a rule instead of ~145).
//!
//! A record is [`RECORD`] bytes, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | rule id |
//! | 4 | action: 0 drop, 1 allow, 2 count, 3 redirect |
//! | 5..7 | redirect port (0 otherwise) |
//! | 7 | match kind: 0 flow, 1 source prefix, 2 destination prefix |
//! | 8 | flags: bit 0 IPv6; prefixes: bit 1 a protocol, bit 2 a port |
//! | 9 | protocol (0 when none) |
//! | 10..12 | flow: source port; prefix: port (0 when none) |
//! | 12..14 | flow: destination port; prefix: length in bits |
//! | 14..30 | flow: source address; prefix: address (IPv4 in the first 4 bytes) |
//! | 30..46 | flow: destination address |
//! | 46..48 | zero |
//!
//! A multi-field rule (with a priority) needs more: a set holding one is
//! written in [`RECORD_WIDE`]-byte records, whose first 48 bytes are the
//! layout above for the other kinds (the rest zero), and for kind 3:
//!
//! | bytes | field |
//! |---|---|
//! | 7 | match kind: 3 multi-field |
//! | 8 | flags: bit 0 IPv6, bit 1 a protocol |
//! | 9 | protocol (0 when any) |
//! | 10..14 | source ports, low and high |
//! | 14..30 | source prefix address |
//! | 30..46 | destination prefix address |
//! | 46, 47 | source and destination prefix lengths |
//! | 48..52 | destination ports, low and high |
//! | 52..56 | priority |
//! | 56..64 | zero |
//!
//! Decoding accepts exactly the records [`encode`] writes for rules the
//! JSON parser accepts (unused bytes zero, IPv4 tails zero, prefix host
//! bits zero, ports only with TCP/UDP): a damaged or crafted record is an
//! error naming the field, never a rule the text form could not express.

use std::net::IpAddr;

use crate::codec::shape::{Raw, RawFlow, RawMatch, RawPort, RawProto, RawRule};
use crate::flow::has_ports;
use crate::prefix::IpPrefix;
use crate::rule::{Action, Allowing, Dir, Match, Rule, RuleId};

/// Bytes of one record.
pub const RECORD: usize = 48;
/// Bytes of one record of a set holding multi-field rules.
pub const RECORD_WIDE: usize = 64;

/// The wide record of any rule.
pub fn encode_wide(r: &Rule) -> [u8; RECORD_WIDE] {
    let mut b = [0u8; RECORD_WIDE];
    match r.matcher {
        Match::Acl { m, priority } => {
            b[0..4].copy_from_slice(&r.id.to_le_bytes());
            let (action, port) = action_bytes(r.action);
            b[4] = action;
            b[5..7].copy_from_slice(&port.to_le_bytes());
            b[7] = 3;
            b[8] = u8::from(m.src().v6()) | (u8::from(m.proto().is_some()) << 1);
            b[9] = m.proto().unwrap_or(0);
            b[10..12].copy_from_slice(&m.sport().lo().to_le_bytes());
            b[12..14].copy_from_slice(&m.sport().hi().to_le_bytes());
            b[14..30].copy_from_slice(m.src().addr());
            b[30..46].copy_from_slice(m.dst().addr());
            b[46] = m.src().len();
            b[47] = m.dst().len();
            b[48..50].copy_from_slice(&m.dport().lo().to_le_bytes());
            b[50..52].copy_from_slice(&m.dport().hi().to_le_bytes());
            b[52..56].copy_from_slice(&priority.to_le_bytes());
        }
        _ => {
            let short = encode(r).expect("not a multi-field rule");
            b[..RECORD].copy_from_slice(&short);
        }
    }
    b
}

/// An action's code and port. A stateful rule's action is its allowing
/// action's code plus [`TRACKED`].
fn action_bytes(a: Action) -> (u8, u16) {
    match a {
        Action::Drop => (0, 0),
        Action::Allow => (1, 0),
        Action::Count => (2, 0),
        Action::Redirect(p) => (3, p),
        Action::Track(Allowing::Allow) => (1 + TRACKED, 0),
        Action::Track(Allowing::Count) => (2 + TRACKED, 0),
        Action::Track(Allowing::Redirect(p)) => (3 + TRACKED, p),
    }
}

/// Added to an allowing action's code for a stateful rule (`track`).
const TRACKED: u8 = 3;

/// The rule of a wide record, or what is wrong with it.
pub fn decode_wide(b: &[u8; RECORD_WIDE]) -> Result<Rule, DecodeError> {
    if b[7] != 3 {
        if b[RECORD..].iter().any(|&x| x != 0) {
            return Err(DecodeError::UnusedBits {
                kind: Kind::of(b[7]),
            });
        }
        let short: &[u8; RECORD] = b[..RECORD].try_into().expect("48 bytes");
        return decode(short);
    }
    let short: &[u8; RECORD] = b[..RECORD].try_into().expect("48 bytes");
    let (id, action) = head(short)?;
    let flags = b[8];
    let v6 = flags & 1 != 0;
    if flags & !3 != 0 || b[56..].iter().any(|&x| x != 0) {
        return Err(DecodeError::UnusedBits {
            kind: Kind::MultiField,
        });
    }
    let prefix = |at: usize, len: u8, field: &'static str| -> Result<IpPrefix, DecodeError> {
        IpPrefix::new(v6, addr_at(short, at), len).map_err(|source| DecodeError::Prefix {
            kind: Kind::MultiField,
            field,
            source,
        })
    };
    let (src, dst) = (
        prefix(14, b[46], "source")?,
        prefix(30, b[47], "destination")?,
    );
    let proto = (flags & 2 != 0).then_some(b[9]);
    if proto.is_none() && b[9] != 0 {
        return Err(DecodeError::FieldWithoutFlag {
            kind: Kind::MultiField,
        });
    }
    let range = |at: usize| RawPort::Range(u16_wide(b, at), u16_wide(b, at + 2));
    let matcher = RawMatch {
        src_prefix: Some(Raw::Value(src)),
        dst_prefix: Some(Raw::Value(dst)),
        proto: proto.map(RawProto::Number),
        sport: Some(range(10)),
        dport: Some(range(48)),
        ..RawMatch::empty()
    };
    let priority = u32::from_le_bytes([b[52], b[53], b[54], b[55]]);
    let raw = RawRule::decoded(id, Some(priority), matcher, action);
    validated(raw, Kind::MultiField)
}

/// The one validator's rule for a record's raw form (the record's own
/// layout checked already), its refusal named with the record's kind.
#[inline(always)]
fn validated(raw: RawRule<'_>, kind: Kind) -> Result<Rule, DecodeError> {
    Rule::try_from(raw).map_err(|e| DecodeError::Invalid {
        kind,
        field: e.field,
        message: e.message,
    })
}

fn u16_wide(b: &[u8; RECORD_WIDE], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// A record's id and action.
fn head(b: &[u8; RECORD]) -> Result<(RuleId, Action), DecodeError> {
    let id = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let port = u16_at(b, 5);
    let action = match (b[4], port) {
        (0, 0) => Action::Drop,
        (1, 0) => Action::Allow,
        (2, 0) => Action::Count,
        (3, p) => Action::Redirect(p),
        (4, 0) => Action::Track(Allowing::Allow),
        (5, 0) => Action::Track(Allowing::Count),
        (6, p) => Action::Track(Allowing::Redirect(p)),
        (a @ (0..=2 | 4 | 5), p) => {
            return Err(DecodeError::PortWithoutRedirect { action: a, port: p })
        }
        (a, _) => return Err(DecodeError::UnknownAction(a)),
    };
    Ok((id, action))
}

/// The 48-byte record of `r`; `None` for a multi-field rule, which needs
/// [`encode_wide`].
pub fn encode(r: &Rule) -> Option<[u8; RECORD]> {
    let mut b = [0u8; RECORD];
    b[0..4].copy_from_slice(&r.id.to_le_bytes());
    let (action, port) = action_bytes(r.action);
    b[4] = action;
    b[5..7].copy_from_slice(&port.to_le_bytes());
    match r.matcher {
        Match::Flow(k) => {
            b[7] = 0;
            b[8] = u8::from(k.v6);
            b[9] = k.proto;
            b[10..12].copy_from_slice(&k.sport.to_le_bytes());
            b[12..14].copy_from_slice(&k.dport.to_le_bytes());
            b[14..30].copy_from_slice(&k.src);
            b[30..46].copy_from_slice(&k.dst);
        }
        Match::Prefix(p) => {
            let (dir, prefix, proto, port) = (p.dir(), p.prefix(), p.proto(), p.port());
            b[7] = match dir {
                Dir::Src => 1,
                Dir::Dst => 2,
            };
            b[8] = u8::from(prefix.v6())
                | (u8::from(proto.is_some()) << 1)
                | (u8::from(port.is_some()) << 2);
            b[9] = proto.unwrap_or(0);
            b[10..12].copy_from_slice(&port.unwrap_or(0).to_le_bytes());
            b[12] = prefix.len();
            b[14..30].copy_from_slice(prefix.addr());
        }
        Match::Acl { .. } => return None,
    }
    Some(b)
}

fn u16_at(b: &[u8; RECORD], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn addr_at(b: &[u8; RECORD], i: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[i..i + 16]);
    a
}

/// A record's match kind, as errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Flow,
    Prefix,
    MultiField,
    /// A kind byte no record has.
    Unknown(u8),
}

impl Kind {
    fn of(byte: u8) -> Self {
        match byte {
            0 => Kind::Flow,
            1 | 2 => Kind::Prefix,
            3 => Kind::MultiField,
            k => Kind::Unknown(k),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Flow => f.write_str("flow"),
            Kind::Prefix => f.write_str("prefix"),
            Kind::MultiField => f.write_str("multi-field"),
            Kind::Unknown(k) => write!(f, "kind {k}"),
        }
    }
}

/// What is wrong with a binary rule record: which check failed, with the
/// record's values that failed it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{kind}: unused bits set")]
    UnusedBits { kind: Kind },
    #[error("unknown match kind {0}")]
    UnknownKind(u8),
    #[error("unknown action {0}")]
    UnknownAction(u8),
    #[error("action {action} with a redirect port ({port})")]
    PortWithoutRedirect { action: u8, port: u16 },
    #[error("flow: an IPv4 address with bytes beyond its fourth")]
    V4Tail,
    #[error("{kind}: {field} prefix: {source}")]
    Prefix {
        kind: Kind,
        field: &'static str,
        #[source]
        source: crate::PrefixError,
    },
    #[error("{kind}: a protocol or port without its flag")]
    FieldWithoutFlag { kind: Kind },
    /// The record's fields, read into the raw form every reader builds,
    /// are not a valid rule: the one validator's refusal (ports without
    /// TCP or UDP, a range's low above its high, a priority out of range),
    /// naming the rule grammar's field.
    #[error("{kind}: {field}: {message}")]
    Invalid {
        kind: Kind,
        field: String,
        message: String,
    },
}

/// The rule of a record, or what is wrong with it.
pub fn decode(b: &[u8; RECORD]) -> Result<Rule, DecodeError> {
    let (id, action) = head(b)?;
    let (matcher, kind) = match b[7] {
        0 => (raw_flow(b)?, Kind::Flow),
        k @ (1 | 2) => (
            raw_prefix(b, if k == 1 { Dir::Src } else { Dir::Dst })?,
            Kind::Prefix,
        ),
        k => return Err(DecodeError::UnknownKind(k)),
    };
    validated(RawRule::decoded(id, None, matcher, action), kind)
}

/// An exact flow's record (kind 0) in the raw form: a port is present
/// when the protocol has ports, or when its bytes are not zero (for the
/// validator to refuse).
#[inline]
fn raw_flow(b: &[u8; RECORD]) -> Result<RawMatch<'static>, DecodeError> {
    let flags = b[8];
    if flags & !1 != 0 || b[46..].iter().any(|&x| x != 0) {
        return Err(DecodeError::UnusedBits { kind: Kind::Flow });
    }
    let v6 = flags & 1 != 0;
    let addr = |at: usize| -> Result<IpAddr, DecodeError> {
        let a = addr_at(b, at);
        if v6 {
            return Ok(IpAddr::from(a));
        }
        if a[4..].iter().any(|&x| x != 0) {
            return Err(DecodeError::V4Tail);
        }
        Ok(IpAddr::from([a[0], a[1], a[2], a[3]]))
    };
    let proto = b[9];
    let port = |at: usize| {
        let p = u16_at(b, at);
        (has_ports(proto) || p != 0).then_some(p)
    };
    Ok(RawMatch {
        flow: Some(RawFlow {
            src: Raw::Value(addr(14)?),
            dst: Raw::Value(addr(30)?),
            proto: RawProto::Number(proto),
            sport: port(10),
            dport: port(12),
        }),
        ..RawMatch::empty()
    })
}

/// A prefix rule's record (kinds 1 and 2) in the raw form.
#[inline]
fn raw_prefix(b: &[u8; RECORD], dir: Dir) -> Result<RawMatch<'static>, DecodeError> {
    let flags = b[8];
    let v6 = flags & 1 != 0;
    if flags & !7 != 0 || b[13] != 0 || b[30..].iter().any(|&x| x != 0) {
        return Err(DecodeError::UnusedBits { kind: Kind::Prefix });
    }
    let len = b[12];
    let prefix = IpPrefix::new(v6, addr_at(b, 14), len).map_err(|source| DecodeError::Prefix {
        kind: Kind::Prefix,
        field: if dir == Dir::Src {
            "source"
        } else {
            "destination"
        },
        source,
    })?;
    let proto = (flags & 2 != 0).then_some(b[9]);
    let port = (flags & 4 != 0).then_some(u16_at(b, 10));
    if proto.is_none() && b[9] != 0 || port.is_none() && u16_at(b, 10) != 0 {
        return Err(DecodeError::FieldWithoutFlag { kind: Kind::Prefix });
    }
    let p = Some(Raw::Value(prefix));
    let (src_prefix, dst_prefix) = match dir {
        Dir::Src => (p, None),
        Dir::Dst => (None, p),
    };
    Ok(RawMatch {
        src_prefix,
        dst_prefix,
        proto: proto.map(RawProto::Number),
        port,
        ..RawMatch::empty()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> Vec<Rule> {
        let texts = [
            json!({"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "192.0.2.1", "proto": "udp", "sport": 53, "dport": 65535}}, "action": "drop"}),
            json!({"id": 4294967295u32, "match": {"flow": {"src": "2001:db8::1", "dst": "2001:db8::2", "proto": "tcp", "sport": 0, "dport": 443}}, "action": {"redirect": 65535}}),
            json!({"id": 3, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "icmp"}}, "action": "count"}),
            json!({"id": 4, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"}),
            json!({"id": 5, "match": {"src_prefix": "2001:db8::/33", "proto": "udp", "port": 53}, "action": "drop"}),
            json!({"id": 6, "match": {"dst_prefix": "0.0.0.0/0", "proto": 47}, "action": "drop"}),
            json!({"id": 7, "match": {"src_prefix": "192.0.2.7"}, "action": {"redirect": 0}}),
            json!({"id": 8, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow", "track": true}),
            json!({"id": 9, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "count", "track": true}),
            json!({"id": 10, "match": {"dst_prefix": "10.0.0.0/8"}, "action": {"redirect": 9}, "track": true}),
        ];
        texts
            .iter()
            .map(|v| crate::parse_rule(v, None).unwrap())
            .collect()
    }

    #[test]
    fn every_kind_of_rule_round_trips() {
        for r in rules() {
            let b = encode(&r).expect("a 48-byte rule");
            assert_eq!(decode(&b), Ok(r), "{r:?}");
            assert_eq!(decode_wide(&encode_wide(&r)), Ok(r), "{r:?}");
        }
        for r in wide_rules() {
            assert_eq!(encode(&r), None);
            assert_eq!(decode_wide(&encode_wide(&r)), Ok(r), "{r:?}");
        }
    }

    /// A refused record says which check failed, with the values that
    /// failed it.
    #[test]
    fn refusals_carry_the_record_values() {
        let rs = rules();
        let prefix = encode(&rs[3]).unwrap(); // dst 10.0.0.0/8, allow
        let mut c = prefix;
        c[4] = 9;
        assert_eq!(decode(&c), Err(DecodeError::UnknownAction(9)));
        let mut c = prefix;
        c[5] = 7;
        assert_eq!(
            decode(&c),
            Err(DecodeError::PortWithoutRedirect { action: 1, port: 7 })
        );
        let mut c = prefix;
        c[7] = 4;
        assert_eq!(decode(&c), Err(DecodeError::UnknownKind(4)));
        let mut c = prefix;
        c[16] = 1; // 10.0.1.0/8: a host bit
        assert!(matches!(
            decode(&c),
            Err(DecodeError::Prefix {
                kind: Kind::Prefix,
                field: "destination",
                source: crate::PrefixError::HostBits { .. }
            })
        ));
        let mut c = prefix;
        c[8] |= 4; // a port flag without a protocol
        c[10] = 80;
        assert!(matches!(
            decode(&c),
            Err(DecodeError::Invalid {
                kind: Kind::Prefix,
                field,
                ..
            }) if field == "match.port"
        ));
    }

    /// Any single-byte change to a valid record either decodes to a rule
    /// the JSON form expresses identically, or is refused; never a panic.
    #[test]
    fn changed_records_are_refused_or_still_valid_rules() {
        let mut refused = 0;
        for r in rules() {
            let b = encode(&r).expect("a 48-byte rule");
            for i in 0..RECORD {
                for x in [0u8, 1, 2, 3, 4, 6, 17, 0x80, 0xff] {
                    let mut c = b;
                    c[i] = x;
                    match decode(&c) {
                        Ok(d) => {
                            let back = crate::parse_rule(&crate::rule_to_json(&d), None);
                            assert_eq!(back, Ok(d), "byte {i} = {x}: {c:?}");
                            assert_eq!(encode(&d), Some(c), "byte {i} = {x}: not canonical");
                        }
                        Err(_) => refused += 1,
                    }
                }
            }
        }
        assert!(refused > 500, "only {refused} refused");
        let mut refused = 0;
        for r in wide_rules().into_iter().chain(rules()) {
            let b = encode_wide(&r);
            for i in 0..RECORD_WIDE {
                for x in [0u8, 1, 2, 3, 4, 6, 17, 0x80, 0xff] {
                    let mut c = b;
                    c[i] = x;
                    match decode_wide(&c) {
                        Ok(d) => {
                            let back = crate::parse_rule(&crate::rule_to_json(&d), None);
                            assert_eq!(back, Ok(d), "byte {i} = {x}: {c:?}");
                            assert_eq!(encode_wide(&d), c, "byte {i} = {x}: not canonical");
                        }
                        Err(_) => refused += 1,
                    }
                }
            }
        }
        assert!(refused > 500, "only {refused} refused");
    }

    fn wide_rules() -> Vec<Rule> {
        let texts = [
            json!({"id": 8, "priority": 7, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "192.168.0.0/16", "proto": "tcp", "sport": "1024-65535", "dport": 80}, "action": "drop"}),
            json!({"id": 9, "priority": 0, "match": {"dst_prefix": "2001:db8::/32"}, "action": {"redirect": 3}}),
            json!({"id": 10, "priority": 2147483647, "match": {"src_prefix": "0.0.0.0/0", "proto": 47}, "action": "count"}),
        ];
        texts
            .iter()
            .map(|v| crate::parse_rule(v, None).unwrap())
            .collect()
    }
}
