//! A prefix rule's match: one address prefix (source or destination), an
//! optional protocol and an optional destination port. Valid by
//! construction: a port only with TCP or UDP, checked once, in
//! [`PrefixMatch::new`].

use crate::flow::has_ports;
use crate::prefix::IpPrefix;

/// Which address a prefix rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    Src,
    Dst,
}

/// A prefix rule's port with a protocol that has none (`proto`: the one
/// given, `None` when none was).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a port needs \"proto\": \"tcp\" or \"udp\"")]
pub struct PortWithoutTransport {
    pub proto: Option<u8>,
}

/// `Match::Prefix`'s fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefixMatch {
    dir: Dir,
    prefix: IpPrefix,
    proto: Option<u8>,
    port: Option<u16>,
}

impl PrefixMatch {
    /// A prefix match; a `port` needs `proto` TCP or UDP.
    pub fn new(
        dir: Dir,
        prefix: IpPrefix,
        proto: Option<u8>,
        port: Option<u16>,
    ) -> Result<Self, PortWithoutTransport> {
        if port.is_some() && !proto.is_some_and(has_ports) {
            return Err(PortWithoutTransport { proto });
        }
        Ok(Self {
            dir,
            prefix,
            proto,
            port,
        })
    }

    pub fn dir(&self) -> Dir {
        self.dir
    }

    pub fn prefix(&self) -> IpPrefix {
        self.prefix
    }

    pub fn proto(&self) -> Option<u8> {
        self.proto
    }

    /// The destination port (only with TCP or UDP).
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::proto;

    #[test]
    fn a_port_needs_tcp_or_udp() {
        let p = IpPrefix::any(false);
        assert!(PrefixMatch::new(Dir::Dst, p, Some(proto::TCP), Some(80)).is_ok());
        assert!(PrefixMatch::new(Dir::Dst, p, Some(47), None).is_ok());
        assert_eq!(
            PrefixMatch::new(Dir::Src, p, Some(proto::ICMP), Some(1)),
            Err(PortWithoutTransport {
                proto: Some(proto::ICMP)
            })
        );
        assert_eq!(
            PrefixMatch::new(Dir::Src, p, None, Some(1)),
            Err(PortWithoutTransport { proto: None })
        );
    }
}
