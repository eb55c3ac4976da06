//! The raw form of a rule: its fields as written, each of the JSON type
//! its place takes, borrowing from the text — what every text reader
//! builds: the serde reader (`fast`), the byte-by-byte reader of the plain
//! spelling (`strict`) and the JSON value reader (`json`, from a
//! `serde_json::Value`). Whether a raw match is a valid one is
//! [`super::validate`]'s to say, once for all of them.

use serde::{Deserialize, Deserializer};

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
pub(crate) struct RawRule<'a> {
    pub(crate) id: u32,
    /// Present: a multi-field rule (`Match::Acl`); checked against
    /// `MAX_PRIORITY` by the validator.
    #[serde(default, deserialize_with = "present")]
    pub(crate) priority: Option<u64>,
    #[serde(rename = "match", borrow)]
    pub(crate) matcher: RawMatch<'a>,
    /// As written: the validator makes it stateful when `track` says so.
    pub(crate) action: Action,
    #[serde(default, deserialize_with = "present")]
    pub(crate) track: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch<'a> {
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) flow: Option<RawFlow<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) src_prefix: Option<&'a str>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) dst_prefix: Option<&'a str>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) proto: Option<RawProto<'a>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) port: Option<u16>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) sport: Option<RawPort<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub(crate) dport: Option<RawPort<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlow<'a> {
    pub(crate) src: &'a str,
    pub(crate) dst: &'a str,
    #[serde(borrow)]
    pub(crate) proto: RawProto<'a>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) sport: Option<u16>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) dport: Option<u16>,
}

/// A protocol as a number (0–255) or a name borrowed from the text.
pub(crate) enum RawProto<'a> {
    Number(u8),
    Name(&'a str),
}

/// By hand rather than `#[serde(untagged)]`: an untagged enum buffers the
/// value and builds an error message (with a search for its position) for
/// every variant that does not match — for `"udp"` the number's — which
/// was ~3 % of loading a rule file. It accepts exactly what the untagged
/// form did: an integer that fits `u8`, or a string without escapes.
impl<'de: 'a, 'a> Deserialize<'de> for RawProto<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawProto<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a protocol number or name")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u8::try_from(v)
                    .map(RawProto::Number)
                    .map_err(|_| E::custom("protocol number over 255"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(RawProto::Name(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A multi-field rule's port: a number, or a string (`"80"`, `"LO-HI"`)
/// borrowed from the text.
pub(crate) enum RawPort<'a> {
    Number(u16),
    Text(&'a str),
}

/// By hand for the reason `RawProto` is: a port that fits `u16`, or a
/// string without escapes.
impl<'de: 'a, 'a> Deserialize<'de> for RawPort<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawPort<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a port or a range")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u16::try_from(v)
                    .map(RawPort::Number)
                    .map_err(|_| E::custom("port over 65535"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(RawPort::Text(v))
            }
        }
        d.deserialize_any(V)
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
