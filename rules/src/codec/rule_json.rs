//! Rules written in the rule-file format (what `parse_rule` reads), field
//! by field: the journal and snapshots stream them without a JSON tree.

use serde::Serialize;

use crate::flow::proto;
use crate::rule::{Dir, Match, Rule};

/// Rules serialize in the rule-file format (round-trips through
/// [`parse_rule`](crate::parse_rule)), streamed field by field: the journal writes every
/// applied batch this way before it is acknowledged, so no intermediate
/// JSON tree is built (that tree cost ~4 µs per rule).
impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let priority = match self.matcher {
            Match::Acl { priority, .. } => Some(priority),
            _ => None,
        };
        let track = self.action.tracked().is_some();
        let mut m = s.serialize_map(Some(
            3 + usize::from(priority.is_some()) + usize::from(track),
        ))?;
        m.serialize_entry("id", &self.id)?;
        if let Some(p) = priority {
            m.serialize_entry("priority", &p)?;
        }
        m.serialize_entry("match", &MatchJson(&self.matcher))?;
        m.serialize_entry("action", &self.action.plain())?;
        if track {
            m.serialize_entry("track", &true)?;
        }
        m.end()
    }
}

/// A match in the rule-file format.
struct MatchJson<'a>(&'a Match);

/// An address written with its `Display` form, without a `String`.
struct Shown<T>(T);

impl<T: std::fmt::Display> Serialize for Shown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// An address as a JSON string. IPv4 (most rules) is written by hand into
/// a stack buffer: formatting through `Display` and serde's `collect_str`
/// was a third of a 1024-rule journal record's serialization time.
struct Addr(std::net::IpAddr);

impl Serialize for Addr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            std::net::IpAddr::V4(a) => {
                let mut buf = [0u8; 15];
                let mut n = 0;
                for (i, &o) in a.octets().iter().enumerate() {
                    if i > 0 {
                        buf[n] = b'.';
                        n += 1;
                    }
                    if o >= 100 {
                        buf[n] = b'0' + o / 100;
                        n += 1;
                    }
                    if o >= 10 {
                        buf[n] = b'0' + o / 10 % 10;
                        n += 1;
                    }
                    buf[n] = b'0' + o % 10;
                    n += 1;
                }
                // Digits and dots only: always UTF-8.
                s.serialize_str(std::str::from_utf8(&buf[..n]).unwrap_or_default())
            }
            std::net::IpAddr::V6(a) => s.collect_str(&a),
        }
    }
}

/// An exact flow in the rule-file format.
struct FlowJson<'a>(&'a crate::flow::FlowKey);

impl Serialize for FlowJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let k = self.0;
        let ported = k.proto == proto::TCP || k.proto == proto::UDP;
        let mut m = s.serialize_map(Some(if ported { 5 } else { 3 }))?;
        m.serialize_entry("src", &Addr(k.src_ip()))?;
        m.serialize_entry("dst", &Addr(k.dst_ip()))?;
        m.serialize_entry("proto", &k.proto)?;
        if ported {
            m.serialize_entry("sport", &k.sport)?;
            m.serialize_entry("dport", &k.dport)?;
        }
        m.end()
    }
}

impl Serialize for MatchJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self.0 {
            Match::Flow(ref k) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("flow", &FlowJson(k))?;
                m.end()
            }
            Match::Prefix(p) => {
                let (dir, prefix, proto, port) = (p.dir(), p.prefix(), p.proto(), p.port());
                let key = if dir == Dir::Src {
                    "src_prefix"
                } else {
                    "dst_prefix"
                };
                let n = 1 + usize::from(proto.is_some()) + usize::from(port.is_some());
                let mut m = s.serialize_map(Some(n))?;
                m.serialize_entry(key, &Shown(prefix))?;
                if let Some(p) = proto {
                    m.serialize_entry("proto", &p)?;
                }
                if let Some(p) = port {
                    m.serialize_entry("port", &p)?;
                }
                m.end()
            }
            Match::Acl { m: ref a, .. } => {
                let n = 2
                    + usize::from(a.proto().is_some())
                    + usize::from(!a.sport().is_any())
                    + usize::from(!a.dport().is_any());
                let mut m = s.serialize_map(Some(n))?;
                m.serialize_entry("src_prefix", &Shown(a.src()))?;
                m.serialize_entry("dst_prefix", &Shown(a.dst()))?;
                if let Some(p) = a.proto() {
                    m.serialize_entry("proto", &p)?;
                }
                for (key, r) in [("sport", a.sport()), ("dport", a.dport())] {
                    if r.is_exact() {
                        m.serialize_entry(key, &r.lo())?;
                    } else if !r.is_any() {
                        m.serialize_entry(key, &Shown(r))?;
                    }
                }
                m.end()
            }
        }
    }
}
