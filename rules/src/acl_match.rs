//! The fields of a multi-field match: two prefixes, a protocol, two port
//! ranges. Apart from the rules that use them (`acl`) so that the rule
//! model (`rule`) can hold one.

use std::fmt;

use crate::flow::FlowKey;
use crate::prefix::IpPrefix;

/// An inclusive range of ports, `lo <= hi` by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    lo: u16,
    hi: u16,
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

    pub fn lo(self) -> u16 {
        self.lo
    }

    pub fn hi(self) -> u16 {
        self.hi
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

/// What a multi-field rule matches: valid by construction ([`AclMatch::new`]
/// is its one constructor): both prefixes of one family, and port ranges
/// only with TCP, UDP or any protocol (other protocols carry no ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AclMatch {
    src: IpPrefix,
    dst: IpPrefix,
    /// `None`: any protocol.
    proto: Option<u8>,
    sport: PortRange,
    dport: PortRange,
}

/// Why a multi-field match was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// The destination prefix is not of the source prefix's family.
    #[error("not of the source prefix's IP version")]
    MixedFamilies,
}

impl AclMatch {
    /// A match, refused when its prefixes are of different families.
    ///
    /// Port ranges are taken with any protocol, as `rte_acl`'s rules and
    /// ClassBench's filter sets take them (`rte_acl` compares the four
    /// bytes after the IP header whatever the protocol; ClassBench's
    /// firewall seeds put port ranges on IGMP). A packet is compared with
    /// the ports its key carries: a decoded packet of a protocol without
    /// ports carries 0 and 0, so such a range matches it only if it holds
    /// 0; a ClassBench trace's keys carry the trace's ports. (Exact flows
    /// and prefix rules name one service, and keep ports for TCP and UDP.)
    pub fn new(
        src: IpPrefix,
        dst: IpPrefix,
        proto: Option<u8>,
        sport: PortRange,
        dport: PortRange,
    ) -> Result<Self, MatchError> {
        if src.v6() != dst.v6() {
            return Err(MatchError::MixedFamilies);
        }
        Ok(Self {
            src,
            dst,
            proto,
            sport,
            dport,
        })
    }

    /// Any packet of a family (every address, protocol and port).
    pub fn any(v6: bool) -> Self {
        Self {
            src: IpPrefix::any(v6),
            dst: IpPrefix::any(v6),
            proto: None,
            sport: PortRange::ANY,
            dport: PortRange::ANY,
        }
    }

    pub fn src(&self) -> IpPrefix {
        self.src
    }

    pub fn dst(&self) -> IpPrefix {
        self.dst
    }

    /// `None`: any protocol.
    pub fn proto(&self) -> Option<u8> {
        self.proto
    }

    pub fn sport(&self) -> PortRange {
        self.sport
    }

    pub fn dport(&self) -> PortRange {
        self.dport
    }

    pub fn v6(&self) -> bool {
        self.src.v6()
    }

    /// Whether a packet with this 5-tuple matches. Ports are compared as
    /// the key carries them (0 for protocols without ports), as `rte_acl`
    /// and ClassBench's traces do.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        self.src.v6() == k.v6
            && self.proto.is_none_or(|p| p == k.proto)
            && self.sport.contains(k.sport)
            && self.dport.contains(k.dport)
            && IpPrefix::mask(k.v6, &k.src, self.src.len()) == *self.src.addr()
            && IpPrefix::mask(k.v6, &k.dst, self.dst.len()) == *self.dst.addr()
    }
}
