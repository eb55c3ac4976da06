//! The one validator of a rule: the raw form every text reader produces
//! ([`RawRule`], [`RawMatch`]: which fields are there, each as its reader
//! took it) into a [`Rule`], or the field and what is wrong with it. Which
//! fields make which form (an exact flow, a prefix rule, a multi-field rule
//! with a priority), how a protocol name, a port range or a prefix is read,
//! and every check the match types do not make themselves are written
//! here once: the JSON value reader ([`super::json`]) and the fast path
//! ([`super::fast`], over the serde and the byte-level readers) both call
//! it, so they cannot disagree on what is valid. The match types' own
//! invariants stay in their constructors ([`AclMatch::new`],
//! [`PrefixMatch::new`], [`ExactFlow::new`]).
//!
//! Only its errors allocate: a valid match (ten million of them in a large
//! rule file) costs no more than the checks.

use std::net::IpAddr;

use crate::acl_match::{AclMatch, PortRange};
use crate::codec::shape::{
    Raw, RawAddr, RawError, RawFlow, RawMatch, RawPort, RawPrefix, RawProto, RawRule,
};
use crate::exact_flow::{ExactFlow, FlowError};
use crate::flow::{has_ports, proto_by_name};
use crate::prefix::IpPrefix;
use crate::prefix_match::PrefixMatch;
use crate::rule::{Dir, Match, Rule, MAX_PRIORITY};

/// A problem and the field it is in (`match.flow.src`, …); public as
/// [`super::shape::RawError`].
pub(crate) type FieldErr = (String, String);

/// The keys of a rule's `match`, by form: what an unknown key's message
/// lists.
pub(crate) const PLAIN_KEYS: [&str; 5] = ["flow", "src_prefix", "dst_prefix", "proto", "port"];
pub(crate) const ACL_KEYS: [&str; 5] = ["src_prefix", "dst_prefix", "proto", "sport", "dport"];
/// The keys of a flow's object.
pub(crate) const FLOW_KEYS: [&str; 5] = ["src", "dst", "proto", "sport", "dport"];

/// The validator's doors for every reader (see `shape.rs`).
impl From<FieldErr> for RawError {
    fn from((field, message): FieldErr) -> Self {
        RawError { field, message }
    }
}

impl<'a> TryFrom<RawRule<'a>> for Rule {
    type Error = RawError;
    /// The one validator (this module's `rule`).
    #[inline(always)]
    fn try_from(r: RawRule<'a>) -> Result<Rule, RawError> {
        rule(r).map_err(RawError::from)
    }
}

impl RawMatch<'_> {
    /// The match this spells for a rule with `priority` (a multi-field
    /// rule) or without one: the validator's answer for a match alone.
    #[inline(always)]
    pub fn validate(self, priority: Option<u32>) -> Result<Match, RawError> {
        matcher(priority, self).map_err(RawError::from)
    }
}

/// The message for a key its object does not have.
pub(crate) fn unknown_key(allowed: &[&str]) -> String {
    format!("unknown field (expected one of: {})", allowed.join(", "))
}

#[cold]
fn err(field: &str, message: impl Into<String>) -> FieldErr {
    (field.into(), message.into())
}

/// The rule `r` spells: its priority in range, its action tracked when
/// it says so (an allowing action only), its match.
#[inline(always)]
pub(crate) fn rule(r: RawRule<'_>) -> Result<Rule, FieldErr> {
    let action = r
        .action
        .with_track(r.track.unwrap_or(false))
        .map_err(|e| err("track", e.to_string()))?;
    let priority = match r.priority {
        None => None,
        Some(p) => Some(
            u32::try_from(p)
                .ok()
                .filter(|&p| p <= MAX_PRIORITY)
                .ok_or_else(|| {
                    err(
                        "priority",
                        format!("{p} is not an integer 0..={MAX_PRIORITY}"),
                    )
                })?,
        ),
    };
    Ok(Rule {
        id: r.id,
        matcher: matcher(priority, r.matcher)?,
        action,
    })
}

/// The match `m` spells, for a rule with `priority` (a multi-field rule)
/// or without one.
#[inline(always)]
pub(crate) fn matcher(priority: Option<u32>, m: RawMatch<'_>) -> Result<Match, FieldErr> {
    match priority {
        Some(priority) => acl(m).map(|m| Match::Acl { m, priority }),
        None => plain(m),
    }
}

/// A multi-field match: `src_prefix` and/or `dst_prefix` (the other
/// defaults to any address of the same family), `proto`, `sport` and
/// `dport` (a port, `"LO-HI"`, or absent for any).
#[inline(always)]
fn acl(m: RawMatch<'_>) -> Result<AclMatch, FieldErr> {
    if m.flow.is_some() {
        return Err(err("match.flow", unknown_key(&ACL_KEYS)));
    }
    if m.port.is_some() {
        return Err(err("match.port", unknown_key(&ACL_KEYS)));
    }
    let src = m
        .src_prefix
        .map(|s| prefix(s, "match.src_prefix"))
        .transpose()?;
    let dst = m
        .dst_prefix
        .map(|s| prefix(s, "match.dst_prefix"))
        .transpose()?;
    let (src, dst) = match (src, dst) {
        (None, None) => {
            return Err(err(
                "match",
                "a rule with a priority needs \"src_prefix\" or \"dst_prefix\" \
                 (\"0.0.0.0/0\" or \"::/0\" for any address)",
            ))
        }
        (Some(s), None) => (s, IpPrefix::any(s.v6())),
        (None, Some(d)) => (IpPrefix::any(d.v6()), d),
        (Some(s), Some(d)) => (s, d),
    };
    let proto = m.proto.map(|p| protocol(p, "match.proto")).transpose()?;
    let sport = m
        .sport
        .map_or(Ok(PortRange::ANY), |p| range(p, "match.sport"))?;
    let dport = m
        .dport
        .map_or(Ok(PortRange::ANY), |p| range(p, "match.dport"))?;
    AclMatch::new(src, dst, proto, sport, dport).map_err(|e| err("match.dst_prefix", e.to_string()))
}

/// A match without a priority: exactly one of `flow`, `src_prefix`,
/// `dst_prefix`; a prefix with an optional `proto` and `port`.
#[inline(always)]
fn plain(m: RawMatch<'_>) -> Result<Match, FieldErr> {
    for (k, there) in [("sport", m.sport.is_some()), ("dport", m.dport.is_some())] {
        if there {
            return Err(err(
                &format!("match.{k}"),
                "port ranges are for rules with a \"priority\" (add one)",
            ));
        }
    }
    let (src, dst) = (m.src_prefix, m.dst_prefix);
    if src.is_some() && dst.is_some() {
        return Err(err(
            "priority",
            "a rule matching both prefixes needs a \"priority\"",
        ));
    }
    let (dir, text, field) = match (m.flow, src, dst) {
        (Some(f), None, None) => {
            for (k, there) in [("proto", m.proto.is_some()), ("port", m.port.is_some())] {
                if there {
                    return Err(err(
                        &format!("match.{k}"),
                        "belongs inside \"flow\" for an exact flow rule",
                    ));
                }
            }
            return flow(f).map(Match::Flow);
        }
        (None, Some(s), None) => (Dir::Src, s, "match.src_prefix"),
        (None, None, Some(d)) => (Dir::Dst, d, "match.dst_prefix"),
        _ => {
            return Err(err(
                "match",
                "needs exactly one of \"flow\", \"src_prefix\", \"dst_prefix\"",
            ))
        }
    };
    let p = prefix(text, field)?;
    let proto = m.proto.map(|p| protocol(p, "match.proto")).transpose()?;
    PrefixMatch::new(dir, p, proto, m.port)
        .map(Match::Prefix)
        .map_err(|e| err("match.port", e.to_string()))
}

/// An exact flow: its addresses, its protocol, and ports present for TCP
/// and UDP and absent otherwise.
#[inline(always)]
pub(crate) fn flow(f: RawFlow<'_>) -> Result<ExactFlow, FieldErr> {
    let addr = |a: RawAddr<'_>, field: &str| -> Result<IpAddr, FieldErr> {
        match a {
            Raw::Text(s) => s
                .parse()
                .map_err(|_| err(field, "not an IPv4 or IPv6 address")),
            Raw::Value(a) => Ok(a),
        }
    };
    let src = addr(f.src, "match.flow.src")?;
    let dst = addr(f.dst, "match.flow.dst")?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(err("match.flow.dst", FlowError::MixedFamilies.to_string()));
    }
    let p = protocol(f.proto, "match.flow.proto")?;
    let port = |v: Option<u16>, field: &str| match (v, has_ports(p)) {
        (Some(v), true) => Ok(v),
        (None, true) => Err(err(field, "missing (required for tcp and udp)")),
        (Some(_), false) => Err(err(field, "only tcp and udp flows have ports")),
        (None, false) => Ok(0),
    };
    let sport = port(f.sport, "match.flow.sport")?;
    let dport = port(f.dport, "match.flow.dport")?;
    ExactFlow::new(src, dst, p, sport, dport).map_err(|e| err("match.flow", e.to_string()))
}

#[inline(always)]
fn prefix(p: RawPrefix<'_>, field: &str) -> Result<IpPrefix, FieldErr> {
    match p {
        Raw::Text(s) => s
            .parse()
            .map_err(|e: crate::prefix::PrefixError| err(field, e.to_string())),
        Raw::Value(p) => Ok(p),
    }
}

/// A protocol's number; a name must be one [`proto_by_name`] knows.
#[inline(always)]
fn protocol(p: RawProto<'_>, field: &str) -> Result<u8, FieldErr> {
    match p {
        RawProto::Number(n) => Ok(n),
        RawProto::Name(s) => proto_by_name(s).ok_or_else(|| {
            err(
                field,
                format!("unknown protocol \"{s}\" (a number 0..=255, or tcp, udp, icmp, icmpv6)"),
            )
        }),
    }
}

/// A port (`80`) or an inclusive range (`"1024-65535"`, or `"80"`).
#[inline(always)]
fn range(p: RawPort<'_>, field: &str) -> Result<PortRange, FieldErr> {
    let s = match p {
        RawPort::Number(n) => return Ok(PortRange::exact(n)),
        RawPort::Range(lo, hi) => {
            return PortRange::new(lo, hi).ok_or_else(|| {
                err(
                    field,
                    format!("\"{lo}-{hi}\": the low port is above the high one"),
                )
            })
        }
        RawPort::Text(s) => s,
    };
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let port = |p: &str| p.trim().parse::<u16>().ok();
    match (port(lo), port(hi)) {
        (Some(lo), Some(hi)) => PortRange::new(lo, hi).ok_or_else(|| {
            err(
                field,
                format!("\"{s}\": the low port is above the high one"),
            )
        }),
        _ => Err(err(
            field,
            format!("\"{s}\" is not a port or a range \"LO-HI\""),
        )),
    }
}
