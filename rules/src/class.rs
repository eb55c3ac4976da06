//! Prefix classes and the priority order between rules.
//!
//! # Priority (documented and deterministic)
//!
//! 1. An exact flow rule matching the packet's 5-tuple.
//! 2. Otherwise the prefix rule with the **longest** prefix that contains the
//!    packet's source (for `src_prefix`) or destination (for `dst_prefix`)
//!    address and whose optional protocol and destination port match.
//! 3. Between prefix rules of equal length: the more specific first
//!    (protocol and port, then protocol only, then neither); then
//!    `dst_prefix` before `src_prefix`.
//! 4. Otherwise no rule: the packet is forwarded (default allow).
//!
//! Two rules with the same match are refused (one would never apply), so
//! the order above always names exactly one rule. The order is defined here
//! ([`PrefixClass::rank`]); the one classifier that walks it is the data
//! plane's published tables (`cfdp_engine::tables::Tables::classify`), and
//! the one validator of ids and matches is the rule store, for rule files
//! and batches alike.

use crate::flow::FlowKey;
use crate::prefix::IpPrefix;
use crate::rule::{Dir, Match};

/// One (family, direction, length, protocol, port) combination in use: the
/// unit the data plane keeps one filter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrefixClass {
    pub v6: bool,
    pub dir: Dir,
    pub len: u8,
    pub proto: Option<u8>,
    pub port: Option<u16>,
}

impl PrefixClass {
    /// The class of a prefix rule's match and its (masked) address; `None`
    /// for an exact flow match or a multi-field one.
    pub fn of(m: &Match) -> Option<(Self, [u8; 16])> {
        match *m {
            Match::Flow(_) | Match::Acl { .. } => None,
            Match::Prefix(p) => Some((
                PrefixClass {
                    v6: p.prefix().v6(),
                    dir: p.dir(),
                    len: p.prefix().len(),
                    proto: p.proto(),
                    port: p.port(),
                },
                *p.prefix().addr(),
            )),
        }
    }

    /// Priority key: smaller sorts first.
    pub fn rank(&self) -> (u8, u8, u8) {
        let specificity = match (self.proto, self.port) {
            (Some(_), Some(_)) => 0,
            (Some(_), None) => 1,
            _ => 2,
        };
        let dir = match self.dir {
            Dir::Dst => 0,
            Dir::Src => 1,
        };
        (u8::MAX - self.len, specificity, dir)
    }

    /// Whether the packet's protocol and port satisfy this class.
    #[inline]
    pub fn admits(&self, k: &FlowKey) -> bool {
        k.v6 == self.v6
            && self.proto.is_none_or(|p| p == k.proto)
            && self.port.is_none_or(|p| p == k.dport)
    }

    /// The packet's address this class looks at, masked to its length.
    #[inline]
    pub fn masked(&self, k: &FlowKey) -> [u8; 16] {
        let a = match self.dir {
            Dir::Src => &k.src,
            Dir::Dst => &k.dst,
        };
        IpPrefix::mask(self.v6, a, self.len)
    }

    /// The 64-bit hash of a masked address in this class's filter, under
    /// `secret` (see [`crate::HashSecret`]).
    #[inline]
    pub fn hash_masked(&self, secret: &crate::HashSecret, masked: &[u8; 16]) -> u64 {
        let n = if self.v6 { 16 } else { 4 };
        secret.hash_bytes(&masked[..n])
    }
}
