//! The typed shapes the fast path reads rules and updates into (borrowing
//! from the text), shared by the serde reader (`fast`) and the byte-by-byte
//! reader of the plain spelling (`strict`). `fast` decides whether a shape
//! is a valid rule.

use serde::{Deserialize, Deserializer};

use crate::acl_match::PortRange;
use crate::batch::Update;
use crate::rule::{Action, Rule};

/// An optional field that, when present, must be a `T` (`null` is not
/// "absent" to the value parser, so it is not taken here either).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FastRule<'a> {
    pub(crate) id: u32,
    /// Present: a multi-field rule (`Match::Acl`); checked against
    /// `MAX_PRIORITY` by `fast::checked`.
    #[serde(default, deserialize_with = "present")]
    pub(crate) priority: Option<u64>,
    #[serde(rename = "match", borrow)]
    pub(crate) matcher: FastMatch<'a>,
    pub(crate) action: Action,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FastMatch<'a> {
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) flow: Option<FastFlow<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) src_prefix: Option<&'a str>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) dst_prefix: Option<&'a str>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) proto: Option<FastProto<'a>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) port: Option<u16>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) sport: Option<FastPort<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) dport: Option<FastPort<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FastFlow<'a> {
    pub(crate) src: &'a str,
    pub(crate) dst: &'a str,
    #[serde(borrow)]
    pub(crate) proto: FastProto<'a>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) sport: Option<u16>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) dport: Option<u16>,
}

/// A protocol as a number (0–255) or a name borrowed from the text.
pub(crate) enum FastProto<'a> {
    Number(u8),
    Name(&'a str),
}

/// By hand rather than `#[serde(untagged)]`: an untagged enum buffers the
/// value and builds an error message (with a search for its position) for
/// every variant that does not match — for `"udp"` the number's — which
/// was ~3 % of loading a rule file. It accepts exactly what the untagged
/// form did: an integer that fits `u8`, or a string without escapes.
impl<'de: 'a, 'a> Deserialize<'de> for FastProto<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = FastProto<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a protocol number or name")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u8::try_from(v)
                    .map(FastProto::Number)
                    .map_err(|_| E::custom("protocol number over 255"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(FastProto::Name(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl FastProto<'_> {
    pub(crate) fn number(&self) -> Option<u8> {
        match *self {
            FastProto::Number(n) => Some(n),
            FastProto::Name(s) => crate::codec::json::proto_by_name(s),
        }
    }
}

/// A multi-field rule's port: a number, or a string (`"80"`, `"LO-HI"`)
/// borrowed from the text.
pub(crate) enum FastPort<'a> {
    Number(u16),
    Text(&'a str),
}

/// By hand for the reason `FastProto` is: a port that fits `u16`, or a
/// string without escapes.
impl<'de: 'a, 'a> Deserialize<'de> for FastPort<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = FastPort<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a port or a range")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u16::try_from(v)
                    .map(FastPort::Number)
                    .map_err(|_| E::custom("port over 65535"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(FastPort::Text(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl FastPort<'_> {
    /// The range it spells, as the value parser reads it (`parse_range`).
    pub(crate) fn range(&self) -> Option<PortRange> {
        match *self {
            FastPort::Number(n) => Some(PortRange::exact(n)),
            FastPort::Text(s) => {
                let (lo, hi) = s.split_once('-').unwrap_or((s, s));
                PortRange::new(lo.trim().parse().ok()?, hi.trim().parse().ok()?)
            }
        }
    }
}

/// An update's fields; `R` is the rule's form (its raw text, or the typed
/// shape read in the same pass).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "R: Deserialize<'de>"))]
pub(crate) struct UpdateShape<'a, R> {
    pub(crate) op: &'a str,
    #[serde(default, deserialize_with = "present")]
    pub(crate) rule: Option<R>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) id: Option<u32>,
}

impl<R> UpdateShape<'_, R> {
    /// The update, if it is valid (`rule` turns the rule's form into a
    /// valid rule).
    pub(crate) fn checked(self, rule: impl FnOnce(R) -> Option<Rule>) -> Option<Update> {
        match (self.op, self.rule, self.id) {
            ("delete", None, Some(id)) => Some(Update::Delete(id)),
            ("insert", Some(r), None) => rule(r).map(Update::Insert),
            ("modify", Some(r), None) => rule(r).map(Update::Modify),
            _ => None,
        }
    }
}
