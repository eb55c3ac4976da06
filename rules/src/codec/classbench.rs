//! ClassBench files (Taylor & Turner): filter sets and header traces.
//!
//! Filter line, tab separated: `@SRC/LEN DST/LEN SPORT_LO : SPORT_HI
//! DPORT_LO : DPORT_HI PROTO/MASK FLAGS/MASK`. The first matching line
//! wins: line `i` (1-based) of `n` becomes rule id `i` with priority
//! `n - i + 1`, so ids are the line numbers the tools report. The TCP
//! flags column is not part of cfdp's rules (nor of `rte_acl`'s): it is
//! read, checked and ignored ([`Import::flags_ignored`] counts the
//! rules where it was not a wildcard).

use std::fmt;

use crate::acl::AclRule;
use crate::codec::shape::{Raw, RawMatch, RawPort, RawProto, RawRule};
use crate::flow::FlowKey;
use crate::rule::{Action, Match, Rule};

/// A line that is not what ClassBench writes, with its number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassBenchError {
    /// 1-based.
    pub line: usize,
    /// The field, e.g. `source prefix`.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for ClassBenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.field, self.message)
    }
}

impl std::error::Error for ClassBenchError {}

/// A filter set read from ClassBench's format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    pub rules: Vec<AclRule>,
    /// Rules whose TCP-flags column was not `0x0000/0x0000`.
    pub flags_ignored: usize,
}

/// Reads a filter set; every rule gets `action`. Each line is read into
/// the raw form every rule reader builds and checked by the one
/// validator (`Rule::try_from`).
pub fn parse_rules(text: &str, action: Action) -> Result<Import, ClassBenchError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let n = lines.len();
    let mut rules = Vec::with_capacity(n);
    let mut flags_ignored = 0;
    for (i, &(lineno, line)) in lines.iter().enumerate() {
        let err = |field, message: String| ClassBenchError {
            line: lineno + 1,
            field,
            message,
        };
        let (matcher, flags_any) = parse_line(line).map_err(|(f, m)| err(f, m))?;
        flags_ignored += usize::from(!flags_any);
        let id = u32::try_from(i + 1).map_err(|_| err("line", "too many rules".into()))?;
        let raw = RawRule::decoded(id, Some((n - i) as u32), matcher, action);
        let rule = Rule::try_from(raw).map_err(|e| err(column(&e.field), e.message))?;
        let Match::Acl { m, priority } = rule.matcher else {
            return Err(err("line", "not a multi-field rule".into()));
        };
        rules.push(AclRule {
            id,
            priority,
            matcher: m,
            action: rule.action,
        });
    }
    Ok(Import {
        rules,
        flags_ignored,
    })
}

/// The ClassBench column the validator's field name is read from.
fn column(field: &str) -> &'static str {
    match field {
        "match.src_prefix" => "source prefix",
        "match.dst_prefix" => "destination prefix",
        "match.sport" => "source ports",
        "match.dport" => "destination ports",
        "match.proto" => "protocol",
        "track" => "action",
        _ => "line",
    }
}

type FieldError = (&'static str, String);

/// One filter line in the raw form, and whether its flags column was a
/// wildcard.
fn parse_line(line: &str) -> Result<(RawMatch<'_>, bool), FieldError> {
    let line = line
        .trim()
        .strip_prefix('@')
        .ok_or(("line", "does not start with '@'".to_string()))?;
    let f: Vec<&str> = line
        .split('\t')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if f.len() != 6 {
        return Err((
            "line",
            format!("{} tab-separated fields, 6 expected", f.len()),
        ));
    }
    let sport = range(f[2], "source ports")?;
    let dport = range(f[3], "destination ports")?;
    let proto = match value_mask(f[4], "protocol")? {
        (_, 0) => None,
        (v, 0xff) if v <= 0xff => Some(v as u8),
        (v, m) => {
            return Err((
                "protocol",
                format!("{v:#x}/{m:#x}: only an exact protocol (mask 0xFF) or any (0x00/0x00)"),
            ))
        }
    };
    let flags = value_mask(f[5], "TCP flags")?;
    let matcher = RawMatch {
        src_prefix: Some(Raw::Text(f[0])),
        dst_prefix: Some(Raw::Text(f[1])),
        proto: proto.map(RawProto::Number),
        sport: Some(sport),
        dport: Some(dport),
        ..RawMatch::empty()
    };
    Ok((matcher, flags.1 == 0))
}

/// A `LO : HI` port column (`field` names it in errors): the validator
/// checks the order.
fn range(s: &str, field: &'static str) -> Result<RawPort<'static>, FieldError> {
    let (lo, hi) = s
        .split_once(':')
        .ok_or_else(|| (field, format!("{s:?}: not LO : HI")))?;
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map_err(|_| (field, format!("{p:?}: not a port")))
    };
    Ok(RawPort::Range(port(lo)?, port(hi)?))
}

/// A `0xVALUE/0xMASK` column (`field` names it in errors).
fn value_mask(s: &str, field: &'static str) -> Result<(u32, u32), FieldError> {
    let (v, m) = s
        .split_once('/')
        .ok_or_else(|| (field, format!("{s:?}: not VALUE/MASK")))?;
    let hex = |x: &str| {
        x.strip_prefix("0x")
            .or_else(|| x.strip_prefix("0X"))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| (field, format!("{x:?}: not a hexadecimal number")))
    };
    Ok((hex(v)?, hex(m)?))
}

/// One packet of a trace and the rule line the generator aimed at (not
/// necessarily its first match).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracePacket {
    pub key: FlowKey,
    pub aimed_at: u32,
}

/// Reads a header trace: `SRC DST SPORT DPORT PROTO FLAGS RULE`,
/// decimal, IPv4.
pub fn parse_trace(text: &str) -> Result<Vec<TracePacket>, ClassBenchError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |field, message: String| ClassBenchError {
            line: i + 1,
            field,
            message,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            return Err(bad("line", format!("{} fields, 7 expected", f.len())));
        }
        let num = |j: usize, field| {
            f[j].parse::<u64>()
                .map_err(|_| bad(field, format!("{:?}: not a number", f[j])))
        };
        let (src, dst) = (num(0, "source")?, num(1, "destination")?);
        let (sport, dport, proto) = (
            num(2, "source port")?,
            num(3, "destination port")?,
            num(4, "protocol")?,
        );
        let small = |v: u64, max: u64, field| {
            if v <= max {
                Ok(v)
            } else {
                Err(bad(field, format!("{v} over {max}")))
            }
        };
        let ip = |v: u64, field| {
            small(v, u64::from(u32::MAX), field)
                .map(|v| std::net::IpAddr::from((v as u32).to_be_bytes()))
        };
        let key = FlowKey::new(
            ip(src, "source")?,
            ip(dst, "destination")?,
            small(proto, 255, "protocol")? as u8,
            small(sport, 65535, "source port")? as u16,
            small(dport, 65535, "destination port")? as u16,
        );
        let aimed_at = match f.get(6) {
            Some(r) => r
                .parse()
                .map_err(|_| bad("rule", format!("{r:?}: not a number")))?,
            None => 0,
        };
        out.push(TracePacket { key, aimed_at });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::first_match;
    use crate::PortRange;

    const SET: &str = "@10.0.0.0/8\t192.168.1.0/24\t0 : 65535\t53 : 53\t0x11/0xFF\t0x0000/0x0000\t\n\
                       @10.1.0.0/16\t0.0.0.0/0\t1024 : 65535\t0 : 65535\t0x06/0xFF\t0x1000/0x1000\t\n\
                       @0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000\t\n";

    #[test]
    fn classbench_lines_become_rules_in_priority_order() {
        let imp = parse_rules(SET, Action::Drop).unwrap();
        assert_eq!(imp.rules.len(), 3);
        assert_eq!(imp.flags_ignored, 1);
        let r = &imp.rules;
        assert_eq!(
            (r[0].id, r[0].priority, r[2].id, r[2].priority),
            (1, 3, 3, 1)
        );
        assert_eq!(r[0].matcher.proto(), Some(17));
        assert_eq!(r[0].matcher.dport(), PortRange::exact(53));
        assert_eq!(r[1].matcher.sport(), PortRange::new(1024, 65535).unwrap());
        assert_eq!(r[2].matcher.proto(), None);
        // First match in line order, by priority.
        let won = winners(
            r,
            "167837953\t3232235777\t999\t53\t17\t0\t1\n\
             167837953\t3232235777\t2000\t80\t6\t0\t2\n\
             16777216\t1\t1\t1\t1\t0\t3\n",
        );
        assert_eq!(won, [1, 2, 3]);
    }

    /// ClassBench's firewall seeds put port ranges on IGMP (protocol 2):
    /// such a line is imported, as `rte_acl` takes it, and a trace packet
    /// of that protocol matches by its ports (a regression: these lines
    /// were refused at import, and fw2/fw4 could not be run).
    #[test]
    fn port_ranges_on_any_protocol_import_and_match_by_the_trace_ports() {
        let imp = parse_rules(
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t6000 : 6010\t0x02/0xFF\t0x0/0x0\n\
             @0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0/0x0\n",
            Action::Drop,
        )
        .unwrap();
        let r = &imp.rules;
        assert_eq!(r[0].matcher.proto(), Some(2));
        assert_eq!(r[0].matcher.dport(), PortRange::new(6000, 6010).unwrap());
        let won = winners(
            r,
            "167837953\t3232235777\t7\t6005\t2\t0\t1\n\
             167837953\t3232235777\t7\t6011\t2\t0\t2\n\
             167837953\t3232235777\t7\t6005\t6\t0\t2\n",
        );
        assert_eq!(won, [1, 2, 2]);
    }

    /// The id of the rule each packet of ClassBench trace `text` first
    /// matches (0: none).
    fn winners(rules: &[AclRule], text: &str) -> Vec<u32> {
        parse_trace(text)
            .unwrap()
            .iter()
            .map(|p| first_match(rules, &p.key).map_or(0, |r| r.id))
            .collect()
    }

    #[test]
    fn bad_classbench_lines_name_the_line_and_field() {
        let e = parse_rules(
            "@10.0.0.1/8\t0.0.0.0/0\t0 : 1\t0 : 1\t0x06/0xFF\t0x0/0x0",
            Action::Drop,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field), (1, "source prefix"));
        let e = parse_rules(
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 1\t0 : 1\t0x06/0xFF\t0x0/0x0\n\
             @10.0.0.0/8\t0.0.0.0/0\t9 : 1\t0 : 1\t0x06/0xFF\t0x0/0x0",
            Action::Drop,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field), (2, "source ports"));
        let e = parse_rules(
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 1\t0 : 1\t0x06/0xF0\t0x0/0x0",
            Action::Drop,
        )
        .unwrap_err();
        assert_eq!(e.field, "protocol");
    }
}
