//! An exact-flow rule's match: one outer 5-tuple. Valid by construction,
//! like [`crate::PrefixMatch`] and [`crate::AclMatch`]: its invariants
//! are checked once, in [`ExactFlow::new`] and [`ExactFlow::of_key`],
//! which every reader of rules (JSON, the fast JSON path, binary records)
//! goes through.

use std::net::IpAddr;
use std::ops::Deref;

use crate::flow::{has_ports, FlowKey};

/// A 5-tuple an exact-flow rule matches: both addresses of one family (an
/// IPv4 address's unused twelve bytes zero, as the data plane keys it),
/// and ports only with TCP or UDP — a packet of another protocol is keyed
/// with ports 0 and 0, so a flow rule of that protocol with a port would
/// never match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExactFlow(FlowKey);

/// Why a 5-tuple is not an exact-flow match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// The destination is not of the source's IP version.
    #[error("src and dst must be the same IP version")]
    MixedFamilies,
    /// An IPv4 key with bytes set past its address's four.
    #[error("an IPv4 address has bytes set past its four")]
    V4Tail,
    /// A port with a protocol that has none.
    #[error("only tcp and udp flows have ports (protocol {proto})")]
    PortsWithoutTransport { proto: u8 },
}

impl ExactFlow {
    /// The flow of `src` to `dst` by `proto` between the ports.
    #[inline]
    pub fn new(
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        sport: u16,
        dport: u16,
    ) -> Result<Self, FlowError> {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(FlowError::MixedFamilies);
        }
        Self::of_key(FlowKey::new(src, dst, proto, sport, dport))
    }

    /// A key as the data plane builds it, checked.
    #[inline]
    pub fn of_key(k: FlowKey) -> Result<Self, FlowError> {
        let v4_tail = |a: &[u8; 16]| a[4..].iter().any(|&b| b != 0);
        if !k.v6 && (v4_tail(&k.src) || v4_tail(&k.dst)) {
            return Err(FlowError::V4Tail);
        }
        if !has_ports(k.proto) && (k.sport | k.dport) != 0 {
            return Err(FlowError::PortsWithoutTransport { proto: k.proto });
        }
        Ok(Self(k))
    }

    /// The 5-tuple.
    pub fn key(&self) -> &FlowKey {
        &self.0
    }
}

impl Deref for ExactFlow {
    type Target = FlowKey;

    fn deref(&self) -> &FlowKey {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::proto;

    #[test]
    fn each_invariant_is_refused_and_a_valid_flow_kept() {
        let (a4, b4): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(
            ExactFlow::new(a4, a6, proto::TCP, 1, 2),
            Err(FlowError::MixedFamilies)
        );
        assert_eq!(
            ExactFlow::new(a4, b4, proto::ICMP, 0, 8),
            Err(FlowError::PortsWithoutTransport { proto: proto::ICMP })
        );
        let mut k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], proto::UDP, 1, 2);
        assert_eq!(*ExactFlow::of_key(k).unwrap().key(), k);
        k.dst[7] = 1;
        assert_eq!(ExactFlow::of_key(k), Err(FlowError::V4Tail));
        let icmp = ExactFlow::new(a4, b4, proto::ICMP, 0, 0).unwrap();
        assert_eq!((icmp.sport, icmp.dport, icmp.v6), (0, 0, false));
        assert!(ExactFlow::new(a6, a6, proto::TCP, 80, 443).is_ok());
    }
}
