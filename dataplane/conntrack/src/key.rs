//! A connection's key: the 5-tuple with its two endpoints in a fixed
//! order, so that a packet and its reply find the same entry, and the
//! direction a packet takes relative to the connection's opener.

use cfdp_rules::FlowKey;

/// Which way a packet goes: as the packet that opened its connection
/// (`Orig`), or back (`Reply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    Orig,
    Reply,
}

impl Dir {
    pub fn index(self) -> usize {
        match self {
            Dir::Orig => 0,
            Dir::Reply => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dir::Orig => "original",
            Dir::Reply => "reply",
        }
    }
}

/// The endpoints of a connection, lower (address, port) first: both
/// directions of a connection have the same key. Exact: two connections
/// never share a key, whatever their hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    v6: bool,
    proto: u8,
    /// An ICMP echo's key: the requester is the lower endpoint. Linux's
    /// ICMP tuple holds the message type, so that an echo request from the
    /// host that was pinged, with the same identifier, is another
    /// connection, not an answer; this bit is that type.
    echo_lo: bool,
    lo: ([u8; 16], u16),
    hi: ([u8; 16], u16),
}

impl ConnKey {
    /// The key of `k`'s connection, and whether `k` goes from the lower
    /// endpoint to the higher one (`true`) or back.
    pub fn of(k: &FlowKey) -> (Self, bool) {
        let (a, b) = ((k.src, k.sport), (k.dst, k.dport));
        // The bytes' lexicographic order, compared as big-endian numbers
        // (two loads and a compare, not a byte loop).
        let num = |x: &([u8; 16], u16)| (u128::from_be_bytes(x.0), x.1);
        let from_lo = num(&a) <= num(&b);
        let (lo, hi) = if from_lo { (a, b) } else { (b, a) };
        (
            Self {
                v6: k.v6,
                proto: k.proto,
                echo_lo: false,
                lo,
                hi,
            },
            from_lo,
        )
    }

    /// The key of an ICMP query's connection (echo, timestamp…): `k`
    /// carries the identifier and the query's class (which query, and its
    /// code) as its ports, `request` says whether it is the request (from the
    /// requester) or the reply (to it). A request and its reply have one
    /// key; a request the other way is another connection.
    pub fn echo(k: &FlowKey, request: bool) -> (Self, bool) {
        let (mut key, from_lo) = Self::of(k);
        // The requester: the request's source, the reply's destination.
        key.echo_lo = from_lo == request;
        (key, from_lo)
    }

    /// The bytes the table hashes (fixed layout, 38 bytes).
    pub fn bytes(&self) -> [u8; 38] {
        let mut b = [0u8; 38];
        b[0] = u8::from(self.v6) | u8::from(self.echo_lo) << 1;
        b[1] = self.proto;
        b[2..18].copy_from_slice(&self.lo.0);
        b[18..20].copy_from_slice(&self.lo.1.to_be_bytes());
        b[20..36].copy_from_slice(&self.hi.0);
        b[36..38].copy_from_slice(&self.hi.1.to_be_bytes());
        b
    }

    /// The key as a table slot stores it: the two addresses as four
    /// words, and in one word the ports (bits 0–31), the protocol (32–39),
    /// the family (40) and the echo requester's side (41).
    /// [`Self::from_words`] reads it back.
    pub(crate) fn words(&self) -> ([u64; 4], u64) {
        let w = |b: &[u8; 16], at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(x)
        };
        (
            [
                w(&self.lo.0, 0),
                w(&self.lo.0, 8),
                w(&self.hi.0, 0),
                w(&self.hi.0, 8),
            ],
            u64::from(self.lo.1)
                | u64::from(self.hi.1) << 16
                | u64::from(self.proto) << 32
                | u64::from(self.v6) << 40
                | u64::from(self.echo_lo) << 41,
        )
    }

    /// The key [`Self::words`] gave (bits of `meta` above 41 ignored).
    pub(crate) fn from_words(addr: [u64; 4], meta: u64) -> Self {
        let a = |x: u64, y: u64| {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&x.to_le_bytes());
            b[8..].copy_from_slice(&y.to_le_bytes());
            b
        };
        Self {
            v6: meta >> 40 & 1 == 1,
            proto: (meta >> 32) as u8,
            echo_lo: meta >> 41 & 1 == 1,
            lo: (a(addr[0], addr[1]), meta as u16),
            hi: (a(addr[2], addr[3]), (meta >> 16) as u16),
        }
    }

    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// The 5-tuple of the packet that goes from the lower endpoint
    /// (`from_lo`) or from the higher one.
    pub fn flow(&self, from_lo: bool) -> FlowKey {
        let ((src, sport), (dst, dport)) = if from_lo {
            (self.lo, self.hi)
        } else {
            (self.hi, self.lo)
        };
        FlowKey {
            v6: self.v6,
            src,
            dst,
            proto: self.proto,
            sport,
            dport,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn flow(src: &str, sp: u16, dst: &str, dp: u16) -> FlowKey {
        FlowKey::new(
            src.parse::<IpAddr>().unwrap(),
            dst.parse::<IpAddr>().unwrap(),
            6,
            sp,
            dp,
        )
    }

    #[test]
    fn both_directions_have_one_key() {
        let out = flow("10.0.0.1", 40000, "192.0.2.1", 80);
        let back = flow("192.0.2.1", 80, "10.0.0.1", 40000);
        let (k1, lo1) = ConnKey::of(&out);
        let (k2, lo2) = ConnKey::of(&back);
        assert_eq!(k1, k2);
        assert_ne!(lo1, lo2);
        assert_eq!(k1.flow(lo1), out);
        assert_eq!(k1.flow(lo2), back);
        // Another port is another connection; so is the same port pair
        // with the endpoints' addresses swapped for other ones.
        assert_ne!(ConnKey::of(&flow("10.0.0.1", 40001, "192.0.2.1", 80)).0, k1);
        assert_ne!(ConnKey::of(&flow("10.0.0.2", 40000, "192.0.2.1", 80)).0, k1);
        let (a, m) = k1.words();
        assert_eq!(ConnKey::from_words(a, m | 0xdead << 42), k1);
        // An echo and its reply share a key; a request the other way not.
        let ping = FlowKey {
            proto: 1,
            sport: 7,
            dport: 7,
            ..out
        };
        let pong = FlowKey {
            proto: 1,
            sport: 7,
            dport: 7,
            ..back
        };
        let e = ConnKey::echo(&ping, true).0;
        assert_eq!(ConnKey::echo(&pong, false).0, e);
        assert_ne!(ConnKey::echo(&pong, true).0, e);
        assert_eq!(ConnKey::from_words(e.words().0, e.words().1), e);
        let v6 = ConnKey::of(&flow("2001:db8::1", 1, "2001:db8::2", 65535)).0;
        assert_eq!(ConnKey::from_words(v6.words().0, v6.words().1), v6);
        assert_ne!(
            k1.bytes(),
            ConnKey::of(&flow("10.0.0.2", 40000, "192.0.2.1", 80))
                .0
                .bytes()
        );
    }
}
