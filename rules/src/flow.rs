//! The flow key: the outer 5-tuple of a packet, and its packed form that is
//! hashed once per packet.

use std::fmt;
use std::net::IpAddr;

/// IP protocol numbers the data plane names.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
}

/// Whether packets of protocol `p` carry ports in their keys (TCP and
/// UDP): the rule forms that name one service take ports only for these.
pub fn has_ports(p: u8) -> bool {
    p == proto::TCP || p == proto::UDP
}

/// A protocol by name (any case): tcp, udp, icmp, icmpv6 (or ipv6-icmp).
pub fn proto_by_name(s: &str) -> Option<u8> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Some(proto::TCP),
        "udp" => Some(proto::UDP),
        "icmp" => Some(proto::ICMP),
        "icmpv6" | "ipv6-icmp" => Some(proto::ICMPV6),
        _ => None,
    }
}

/// An outer 5-tuple. Ports are 0 for protocols other than TCP and UDP, and
/// for fragments whose transport header is not known.
///
/// Addresses are stored as 16 bytes (IPv4 in the first four) so the key is
/// `Copy`, fixed-size and cheap to build in the per-packet path.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub v6: bool,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

impl FlowKey {
    /// The 5-tuple of a packet going the other way (an answer's).
    #[inline]
    pub fn reply(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    pub fn new(src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Self {
        let (v6, s) = addr_bytes(src);
        let (_, d) = addr_bytes(dst);
        Self {
            v6,
            src: s,
            dst: d,
            proto,
            sport,
            dport,
        }
    }

    #[inline]
    pub fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> Self {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s[..4].copy_from_slice(&src);
        d[..4].copy_from_slice(&dst);
        Self {
            v6: false,
            src: s,
            dst: d,
            proto,
            sport,
            dport,
        }
    }

    #[inline]
    pub fn v6(src: [u8; 16], dst: [u8; 16], proto: u8, sport: u16, dport: u16) -> Self {
        Self {
            v6: true,
            src,
            dst,
            proto,
            sport,
            dport,
        }
    }

    pub fn src_ip(&self) -> IpAddr {
        ip_of(self.v6, &self.src)
    }

    pub fn dst_ip(&self) -> IpAddr {
        ip_of(self.v6, &self.dst)
    }

    /// Address length in bytes (4 or 16).
    #[inline]
    pub fn addr_len(&self) -> usize {
        if self.v6 {
            16
        } else {
            4
        }
    }

    /// The packed key: src, dst, proto, sport, dport (13 bytes for IPv4, 37
    /// for IPv6), big-endian ports. This is what is hashed.
    #[inline]
    pub fn pack(&self, out: &mut [u8; 37]) -> usize {
        let n = self.addr_len();
        out[..n].copy_from_slice(&self.src[..n]);
        out[n..2 * n].copy_from_slice(&self.dst[..n]);
        out[2 * n] = self.proto;
        out[2 * n + 1..2 * n + 3].copy_from_slice(&self.sport.to_be_bytes());
        out[2 * n + 3..2 * n + 5].copy_from_slice(&self.dport.to_be_bytes());
        2 * n + 5
    }

    /// The one 64-bit hash of this key that every exact-flow filter uses.
    ///
    /// The hash input is assembled from whole 64-bit words (addresses, then
    /// protocol and ports) rather than packed byte by byte: rapidhash reads
    /// its input 8 bytes at a time, and reading back bytes just written one
    /// by one stalls on store forwarding (it was the hottest spot of the
    /// worker loop in `bench --bin pipeline`).
    #[inline]
    pub fn hash(&self) -> u64 {
        self.hash_with(&crate::HashSecret::PUBLIC)
    }

    /// [`FlowKey::hash`] under `secret` (see [`crate::HashSecret`]).
    #[inline]
    pub fn hash_with(&self, secret: &crate::HashSecret) -> u64 {
        let meta =
            u64::from(self.sport) | u64::from(self.dport) << 16 | u64::from(self.proto) << 32;
        if self.v6 {
            let w = |b: &[u8; 16], i: usize| {
                u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
            };
            let words = [
                w(&self.src, 0),
                w(&self.src, 8),
                w(&self.dst, 0),
                w(&self.dst, 8),
                meta | 1 << 40,
            ];
            let mut buf = [0u8; 40];
            for (chunk, word) in buf.chunks_exact_mut(8).zip(words) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            secret.hash_bytes(&buf)
        } else {
            let a = u64::from(u32::from_le_bytes([
                self.src[0],
                self.src[1],
                self.src[2],
                self.src[3],
            ])) | u64::from(u32::from_le_bytes([
                self.dst[0],
                self.dst[1],
                self.dst[2],
                self.dst[3],
            ])) << 32;
            let mut buf = [0u8; 16];
            buf[..8].copy_from_slice(&a.to_le_bytes());
            buf[8..].copy_from_slice(&meta.to_le_bytes());
            secret.hash_bytes(&buf)
        }
    }

    /// A hash that is the same for both directions of a flow (NIC-RSS-like
    /// symmetric spreading: a flow and its reply land on one worker).
    #[inline]
    pub fn symmetric_hash(&self) -> u64 {
        let a = (self.src, self.sport);
        let b = (self.dst, self.dport);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut buf = [0u8; 37];
        let n = self.addr_len();
        buf[..n].copy_from_slice(&lo.0[..n]);
        buf[n..2 * n].copy_from_slice(&hi.0[..n]);
        buf[2 * n] = self.proto;
        buf[2 * n + 1..2 * n + 3].copy_from_slice(&lo.1.to_be_bytes());
        buf[2 * n + 3..2 * n + 5].copy_from_slice(&hi.1.to_be_bytes());
        crate::hash_bytes(&buf[..2 * n + 5])
    }
}

fn addr_bytes(ip: IpAddr) -> (bool, [u8; 16]) {
    let mut b = [0u8; 16];
    match ip {
        IpAddr::V4(a) => {
            b[..4].copy_from_slice(&a.octets());
            (false, b)
        }
        IpAddr::V6(a) => (true, a.octets()),
    }
}

fn ip_of(v6: bool, b: &[u8; 16]) -> IpAddr {
    if v6 {
        IpAddr::from(*b)
    } else {
        IpAddr::from([b[0], b[1], b[2], b[3]])
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {}",
            self.src_ip(),
            self.dst_ip(),
            self.proto,
            self.sport,
            self.dport
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_hash_is_direction_free_and_hash_is_not() {
        let a = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 1234, 80);
        let b = FlowKey::v4([10, 0, 0, 2], [10, 0, 0, 1], 6, 80, 1234);
        assert_eq!(a.symmetric_hash(), b.symmetric_hash());
        assert_ne!(a.hash(), b.hash());
        let mut buf = [0u8; 37];
        assert_eq!(a.pack(&mut buf), 13);
        assert_eq!(&buf[..13], &[10, 0, 0, 1, 10, 0, 0, 2, 6, 4, 210, 0, 80]);
        let v6 = FlowKey::new(
            "2001:db8::1".parse().unwrap(),
            "::1".parse().unwrap(),
            17,
            1,
            2,
        );
        assert_eq!(v6.pack(&mut buf), 37);
        assert_eq!(v6.to_string(), "2001:db8::1 ::1 17 1 2");
    }
}
