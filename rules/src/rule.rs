//! The rule model — [`Rule`], [`Match`], [`Action`] — and the grammar of
//! its JSON form, which [`crate::codec::json`] reads and writes (the
//! other codecs read the same rules from other spellings).
//!
//! A rule file is JSON:
//!
//! ```json
//! {"rules": [
//!   {"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2",
//!                                "proto": "tcp", "sport": 40000, "dport": 80}},
//!    "action": "drop"},
//!   {"id": 2, "match": {"dst_prefix": "192.0.2.0/24", "proto": "udp", "port": 53},
//!    "action": {"redirect": 1}},
//!   {"id": 3, "match": {"src_prefix": "2001:db8::/32"}, "action": "count"}
//! ]}
//! ```
//!
//! * `flow`: an exact outer 5-tuple. `proto` is a number or `tcp`, `udp`,
//!   `icmp`, `icmpv6`; `sport`/`dport` are required for TCP and UDP and not
//!   allowed otherwise (such flows have ports 0, as the data plane keys them).
//! * `src_prefix` / `dst_prefix`: an IPv4 (/0–/32) or IPv6 (/0–/128) prefix
//!   with host bits clear; optionally `proto`, and `port` — the
//!   **destination** port, which needs `proto` tcp or udp.
//! * `action`: `"drop"`, `"allow"`, `"count"` (allow and count per rule) or
//!   `{"redirect": PORT}` (send out of output port PORT).
//! * `track`: `true` beside an allowing action makes the rule stateful
//!   ([`Action::Track`]).
//!
//! Every problem is reported with the rule's position, its id when known,
//! and the field: `rule #2 (id 7): match.flow.sport: ...`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::acl_match::AclMatch;
use crate::exact_flow::ExactFlow;
use crate::prefix_match::PrefixMatch;

/// Rule identifier, chosen by the operator, unique in a rule set.
pub type RuleId = u32;

/// What happens to a matching packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    Drop,
    Allow,
    /// Allow, and count packets and bytes per rule.
    Count,
    /// Forward out of the given output port.
    Redirect(u16),
    /// A stateful rule (`"track": true` beside an allowing action): the
    /// packet it allows opens a connection, whose packets in both
    /// directions then take this action before any rule is consulted
    /// (`cfdp-conntrack`). Written as its action and `"track": true`, never
    /// as a variant of its own: serde skips it.
    #[serde(skip)]
    Track(Allowing),
}

// An action rides in every table entry and burst slot (`RuleRef`): the
// stateful variant must not make it bigger than the four bytes of a
// redirect (tag and port).
const _: () = assert!(std::mem::size_of::<Action>() == 4);

/// The actions that let a packet through: those a stateful rule may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allowing {
    Allow,
    Count,
    Redirect(u16),
}

impl Allowing {
    /// The action it is when not tracked.
    pub fn action(self) -> Action {
        match self {
            Allowing::Allow => Action::Allow,
            Allowing::Count => Action::Count,
            Allowing::Redirect(p) => Action::Redirect(p),
        }
    }
}

/// `"track": true` beside an action that does not let the packet through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotAllowing(pub Action);

impl fmt::Display for NotAllowing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "only an allowing action (allow, count, redirect) can be tracked, not {}",
            self.0.name()
        )
    }
}

impl std::error::Error for NotAllowing {}

impl Action {
    /// The action's name, tracked or not (`track` is said apart).
    pub fn name(&self) -> &'static str {
        match self {
            Action::Drop => "drop",
            Action::Allow | Action::Track(Allowing::Allow) => "allow",
            Action::Count | Action::Track(Allowing::Count) => "count",
            Action::Redirect(_) | Action::Track(Allowing::Redirect(_)) => "redirect",
        }
    }

    /// What happens to the packet itself: the action without its tracking.
    pub fn plain(self) -> Action {
        match self {
            Action::Track(a) => a.action(),
            a => a,
        }
    }

    /// The action a stateful rule applies, when this is one.
    pub fn tracked(self) -> Option<Allowing> {
        match self {
            Action::Track(a) => Some(a),
            _ => None,
        }
    }

    /// This action made stateful (`track`) or not; only an allowing
    /// action can be tracked.
    pub fn with_track(self, track: bool) -> Result<Action, NotAllowing> {
        let plain = self.plain();
        if !track {
            return Ok(plain);
        }
        match plain {
            Action::Allow => Ok(Action::Track(Allowing::Allow)),
            Action::Count => Ok(Action::Track(Allowing::Count)),
            Action::Redirect(p) => Ok(Action::Track(Allowing::Redirect(p))),
            a => Err(NotAllowing(a)),
        }
    }
}

/// An action name that is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAction(pub String);

impl fmt::Display for UnknownAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: not an action (drop, allow, count, redirect:PORT)",
            self.0
        )
    }
}

impl std::error::Error for UnknownAction {}

/// `drop`, `allow`, `count`, or `redirect:PORT` (command-line spelling).
impl std::str::FromStr for Action {
    type Err = UnknownAction;
    fn from_str(s: &str) -> Result<Self, UnknownAction> {
        match s {
            "drop" => Ok(Action::Drop),
            "allow" => Ok(Action::Allow),
            "count" => Ok(Action::Count),
            _ => s
                .strip_prefix("redirect:")
                .and_then(|p| p.parse().ok())
                .map(Action::Redirect)
                .ok_or_else(|| UnknownAction(s.to_string())),
        }
    }
}

pub use crate::prefix_match::Dir;

/// What a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Match {
    /// One 5-tuple exactly.
    Flow(ExactFlow),
    /// One prefix, with an optional protocol and destination port.
    Prefix(PrefixMatch),
    /// A multi-field match with an explicit priority (highest wins, ties
    /// to the lower id). Two rules may share a [`AclMatch`] at different
    /// priorities.
    Acl { m: AclMatch, priority: u32 },
}

/// Highest explicit priority a rule may take: the rule forms without one
/// (exact flows, single prefixes) rank above every explicit priority, in
/// today's order.
pub const MAX_PRIORITY: u32 = i32::MAX as u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: RuleId,
    pub matcher: Match,
    pub action: Action,
}

/// A rule file or rule problem, naming the rule and the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// Position of the rule in its list (0-based), when the problem is in one rule.
    pub index: Option<usize>,
    pub id: Option<u64>,
    /// Dotted path of the field, e.g. `match.flow.sport`.
    pub field: String,
    pub message: String,
}

impl RuleError {
    pub fn new(
        index: Option<usize>,
        id: Option<u64>,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            index,
            id,
            field: field.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, self.id) {
            (Some(i), Some(id)) => write!(f, "rule #{} (id {id}): ", i + 1)?,
            (Some(i), None) => write!(f, "rule #{}: ", i + 1)?,
            (None, Some(id)) => write!(f, "rule id {id}: ")?,
            (None, None) => {}
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuleError {}
