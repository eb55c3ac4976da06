//! The raw form of a rule: which fields it has and each as its reader
//! took it — what every reader builds: the serde reader (`fast`), the
//! byte-by-byte reader of the plain spelling (`strict`) and the JSON value
//! reader (`json`, from a `serde_json::Value`), borrowing their leaves
//! from the text; the binary records (`binary`), ClassBench lines
//! (`classbench`) and P4Runtime entries (the `cfdp-p4runtime` crate), with
//! leaves they decoded themselves ([`Raw::Value`], [`RawPort::Range`]).
//! Whether a raw rule is a valid one is the validator's (`codec/validate.rs`) to say, once
//! for all of them: `Rule::try_from(raw)`, or [`RawMatch::validate`] for
//! a match alone.

use std::net::IpAddr;

use serde::{Deserialize, Deserializer};

use crate::batch::Update;
use crate::prefix::IpPrefix;
use crate::rule::{Action, Rule};

/// A leaf of the raw form: text borrowed from a text reader's input,
/// parsed by the validator, or a value a binary reader decoded (`T`'s own
/// constructor has checked what it checks: a prefix's host bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw<'a, T> {
    Text(&'a str),
    Value(T),
}

/// From a string without escapes, as [`RawProto`] takes a name.
impl<'de: 'a, 'a, T> Deserialize<'de> for Raw<'a, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a str>::deserialize(d).map(Raw::Text)
    }
}

/// A prefix as written (`"10.0.0.0/8"`) or decoded.
pub type RawPrefix<'a> = Raw<'a, IpPrefix>;
/// An address as written or decoded.
pub type RawAddr<'a> = Raw<'a, IpAddr>;

/// Why a raw rule is not a valid one: the field (`match.flow.src`, …) and
/// what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RawError {
    pub field: String,
    pub message: String,
}

impl<'a> RawRule<'a> {
    /// The raw form of a rule a reader decoded whole: its action (a
    /// stateful one as its plain action and `track`, as the text spells
    /// it) and, for a multi-field rule, its priority.
    pub fn decoded(id: u32, priority: Option<u32>, matcher: RawMatch<'a>, action: Action) -> Self {
        RawRule {
            id,
            priority: priority.map(u64::from),
            matcher,
            action: action.plain(),
            track: action.tracked().is_some().then_some(true),
        }
    }
}

impl RawMatch<'_> {
    /// No field at all (readers fill in what they find).
    pub fn empty() -> Self {
        RawMatch {
            flow: None,
            src_prefix: None,
            dst_prefix: None,
            proto: None,
            port: None,
            sport: None,
            dport: None,
        }
    }
}

/// An optional field that, when present, must be a `T` (`null` is not
/// "absent" to the value parser, so it is not taken here either).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A rule's fields (see the module docs).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule<'a> {
    pub id: u32,
    /// Present: a multi-field rule (`Match::Acl`); checked against
    /// `MAX_PRIORITY` by the validator.
    #[serde(default, deserialize_with = "present")]
    pub priority: Option<u64>,
    #[serde(rename = "match", borrow)]
    pub matcher: RawMatch<'a>,
    /// As written, not stateful: the validator makes it stateful when
    /// `track` says so (and takes a stateful one as its plain action).
    pub action: Action,
    #[serde(default, deserialize_with = "present")]
    pub track: Option<bool>,
}

/// A rule's match: which keys it has (the validator decides the form).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch<'a> {
    #[serde(default, deserialize_with = "present", borrow)]
    pub flow: Option<RawFlow<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub src_prefix: Option<RawPrefix<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub dst_prefix: Option<RawPrefix<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub proto: Option<RawProto<'a>>,
    #[serde(default, deserialize_with = "present")]
    pub port: Option<u16>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub sport: Option<RawPort<'a>>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub dport: Option<RawPort<'a>>,
}

/// An exact flow's 5-tuple: ports present for TCP and UDP only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFlow<'a> {
    #[serde(borrow)]
    pub src: RawAddr<'a>,
    #[serde(borrow)]
    pub dst: RawAddr<'a>,
    #[serde(borrow)]
    pub proto: RawProto<'a>,
    #[serde(default, deserialize_with = "present")]
    pub sport: Option<u16>,
    #[serde(default, deserialize_with = "present")]
    pub dport: Option<u16>,
}

/// A protocol as a number (0–255) or a name borrowed from the text.
pub enum RawProto<'a> {
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
/// borrowed from the text, or a range a binary reader decoded (low and
/// high, in any order: the validator refuses a low above the high).
pub enum RawPort<'a> {
    Number(u16),
    Text(&'a str),
    Range(u16, u16),
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
