//! The fields of a multi-field match: two prefixes, a protocol, two port
//! ranges. Apart from the rules that use them (`acl`) so that the rule
//! model (`rule`) can hold one.

use std::fmt;

use crate::flow::FlowKey;
use crate::prefix::IpPrefix;

/// An inclusive range of ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange { lo: 0, hi: 65535 };

    /// `lo..=hi`, or `None` when `lo > hi`.
    pub fn new(lo: u16, hi: u16) -> Option<Self> {
        (lo <= hi).then_some(Self { lo, hi })
    }

    pub fn exact(p: u16) -> Self {
        Self { lo: p, hi: p }
    }

    #[inline]
    pub fn contains(self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }

    pub fn is_any(self) -> bool {
        self == Self::ANY
    }

    pub fn is_exact(self) -> bool {
        self.lo == self.hi
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_exact() {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// What a multi-field rule matches. Both prefixes are of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AclMatch {
    pub src: IpPrefix,
    pub dst: IpPrefix,
    /// `None`: any protocol.
    pub proto: Option<u8>,
    pub sport: PortRange,
    pub dport: PortRange,
}

impl AclMatch {
    /// Whether its ports fit its protocol: port ranges only with TCP, UDP
    /// or any protocol (other protocols carry no ports).
    pub fn ports_fit_protocol(&self) -> bool {
        matches!(
            self.proto,
            None | Some(crate::flow::proto::TCP | crate::flow::proto::UDP)
        ) || self.sport.is_any() && self.dport.is_any()
    }

    pub fn v6(&self) -> bool {
        self.src.v6
    }

    /// Whether a packet with this 5-tuple matches. Ports are compared as
    /// the key carries them (0 for protocols without ports), as `rte_acl`
    /// and ClassBench's traces do.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        self.src.v6 == k.v6
            && self.proto.is_none_or(|p| p == k.proto)
            && self.sport.contains(k.sport)
            && self.dport.contains(k.dport)
            && IpPrefix::mask(k.v6, &k.src, self.src.len) == self.src.addr
            && IpPrefix::mask(k.v6, &k.dst, self.dst.len) == self.dst.addr
    }
}
