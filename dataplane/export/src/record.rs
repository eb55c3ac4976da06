//! One flow's record: what a cache keeps of it and what is exported.

use cfdp_rules::FlowKey;

/// What the data plane did with a flow's packets (IPFIX
/// `forwardingStatus`, RFC 7270 §4.12: the two high bits are the status,
/// the low six its reason code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Forwarding {
    /// Sent on (an allow rule, a count rule, or no rule).
    Forwarded,
    /// Sent on to a port a rule named.
    Redirected,
    /// Dropped by a rule.
    Dropped,
}

impl Forwarding {
    /// The `forwardingStatus` value (unsigned8; RFC 7270 §4.12: status
    /// 01 forwarded, 10 dropped in the two high bits, a reason code in the
    /// six low ones): forwarded or redirected 64 ("forwarded, unknown
    /// reason": the registry has no reason for a redirect), dropped by a
    /// rule 129 ("dropped, ACL deny").
    pub fn ipfix(self) -> u8 {
        match self {
            Forwarding::Forwarded | Forwarding::Redirected => 64,
            Forwarding::Dropped => 129,
        }
    }
}

/// Why a record left its cache (IPFIX `flowEndReason`, IE 136).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// No packet for the idle timeout (1).
    Idle,
    /// Active longer than the active timeout (2): the flow goes on, a new
    /// record starts.
    Active,
    /// The end of the flow was seen: TCP FIN or RST (3).
    EndOfFlow,
    /// Forced out: the cache was full, or the exporter is shutting down,
    /// or the capture ended (4, "forced end").
    Forced,
    /// The cache was full and this was its oldest record (5, "lack of
    /// resources").
    LackOfResources,
    /// The record's connection is gone: a packet of its 5-tuple opened a
    /// new one (conntrack's entry expired — its own idle timeout for the
    /// connection's state, shorter than the cache's in some states — or
    /// was replaced), so the old connection's record ends and the new
    /// connection starts its own, as a record per connection from
    /// conntrack's events would. IANA's `flowEndReason` registry has no
    /// value for it (1–5 only); exported as 1, idle timeout: what ended the
    /// connection.
    ConnectionExpired,
}

impl EndReason {
    pub fn ipfix(self) -> u8 {
        match self {
            EndReason::Idle | EndReason::ConnectionExpired => 1,
            EndReason::Active => 2,
            EndReason::EndOfFlow => 3,
            EndReason::Forced => 4,
            EndReason::LackOfResources => 5,
        }
    }
}

/// Packets and bytes of one direction of a biflow record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub packets: u64,
    pub bytes: u64,
}

/// A flow's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// The flow's 5-tuple; of a biflow record, the initiator's (the
    /// direction its connection was opened in).
    pub key: FlowKey,
    pub packets: u64,
    pub bytes: u64,
    /// A biflow record (RFC 5103; `[ipfix] biflow`): the packets and
    /// bytes of the answers, those of `key.reply()`. `None`: a uniflow
    /// record (no answer was counted in it).
    pub reverse: Option<Counts>,
    /// The id of the rule that decided the record's first packet (the one
    /// that opened its connection, for a tracked flow); `None`: no rule
    /// did (the default action), or rules are not kept
    /// (`[ipfix] rule_pen` 0).
    pub rule: Option<cfdp_rules::RuleId>,
    /// First and last packet times, ns since the Unix epoch (a capture's
    /// own timestamps in a replay).
    pub first_ns: u64,
    pub last_ns: u64,
    /// The input port (`ingressInterface`).
    pub port: u16,
    /// The verdict of the flow's last packet.
    pub forwarding: Forwarding,
    pub end: EndReason,
}
