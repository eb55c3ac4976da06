//! IP prefixes (`10.0.0.0/8`, `2001:db8::/32`).
//!
//! An [`IpPrefix`] is valid by construction: its fields are private and
//! every constructor checks that the length fits the family and that no
//! host bit is set, so the classifiers, encoders and the journal never
//! meet a prefix that contradicts itself.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A network prefix with its host bits cleared (IPv4 in the first four
/// bytes of `addr`, the rest zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    v6: bool,
    addr: [u8; 16],
    len: u8,
}

impl IpPrefix {
    pub fn max_len(v6: bool) -> u8 {
        if v6 {
            128
        } else {
            32
        }
    }

    /// Every address of a family (`0.0.0.0/0`, `::/0`).
    pub const fn any(v6: bool) -> Self {
        Self {
            v6,
            addr: [0; 16],
            len: 0,
        }
    }

    /// The prefix `addr/len`, refused when `len` exceeds the family's
    /// width or a bit past the prefix (host bits, and bytes 4.. of IPv4) is
    /// set: `10.0.0.1/8` is refused rather than silently widened.
    pub fn new(v6: bool, addr: [u8; 16], len: u8) -> Result<Self, PrefixError> {
        let max = Self::max_len(v6);
        if len > max {
            return Err(PrefixError::Length {
                given: len.to_string(),
                max,
            });
        }
        let masked = Self::mask(v6, &addr, len);
        if masked != addr {
            return Err(PrefixError::HostBits {
                // Displayed as given (the constructor has not checked it).
                given: Self { v6, addr, len }.to_string(),
                suggested: Self {
                    v6,
                    addr: masked,
                    len,
                },
            });
        }
        Ok(Self { v6, addr, len })
    }

    /// The prefix of length `len` that holds `addr` (host bits dropped):
    /// for callers that mean "the network of this address".
    pub fn covering(v6: bool, addr: &[u8; 16], len: u8) -> Result<Self, PrefixError> {
        let max = Self::max_len(v6);
        if len > max {
            return Err(PrefixError::Length {
                given: len.to_string(),
                max,
            });
        }
        Ok(Self {
            v6,
            addr: Self::mask(v6, addr, len),
            len,
        })
    }

    pub fn v6(&self) -> bool {
        self.v6
    }

    /// The network address (host bits clear).
    pub fn addr(&self) -> &[u8; 16] {
        &self.addr
    }

    /// The prefix length in bits.
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection's
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Keeps the first `len` bits of `addr` (IPv4 uses the first 4 bytes).
    #[inline]
    pub fn mask(v6: bool, addr: &[u8; 16], len: u8) -> [u8; 16] {
        let mut out = [0u8; 16];
        let bytes = if v6 { 16 } else { 4 };
        let full = usize::from(len / 8).min(bytes);
        out[..full].copy_from_slice(&addr[..full]);
        let rem = len % 8;
        if rem != 0 && full < bytes {
            out[full] = addr[full] & (0xffu8 << (8 - rem));
        }
        out
    }

    pub fn contains(&self, v6: bool, addr: &[u8; 16]) -> bool {
        self.v6 == v6 && Self::mask(v6, addr, self.len) == self.addr
    }
}

/// Why a prefix was refused, with what a caller needs to say so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("'{given}' is not an IPv4 or IPv6 address")]
    Address { given: String },
    #[error("prefix length '{given}' must be 0..={max}")]
    Length { given: String, max: u8 },
    /// Bits past the prefix are set; `suggested` is the prefix the caller
    /// probably meant.
    #[error("'{given}' has host bits set (did you mean {suggested}?)")]
    HostBits { given: String, suggested: IpPrefix },
}

impl FromStr for IpPrefix {
    type Err = PrefixError;

    /// `ADDR/LEN`, or a bare address (a host prefix). Host bits must be zero:
    /// `10.0.0.1/8` is refused rather than silently widened.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = a.trim().parse().map_err(|_| PrefixError::Address {
            given: a.to_string(),
        })?;
        let v6 = ip.is_ipv6();
        let max = Self::max_len(v6);
        let len = match l {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| PrefixError::Length {
                    given: l.to_string(),
                    max,
                })?,
        };
        let mut addr = [0u8; 16];
        match ip {
            IpAddr::V4(v) => addr[..4].copy_from_slice(&v.octets()),
            IpAddr::V6(v) => addr = v.octets(),
        }
        Self::new(v6, addr, len).map_err(|e| match e {
            PrefixError::HostBits { suggested, .. } => PrefixError::HostBits {
                given: s.to_string(),
                suggested,
            },
            e => e,
        })
    }
}

impl IpPrefix {
    fn addr_string(&self) -> String {
        if self.v6 {
            IpAddr::from(self.addr).to_string()
        } else {
            IpAddr::from([self.addr[0], self.addr[1], self.addr[2], self.addr[3]]).to_string()
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr_string(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_masks_and_refuses() {
        let p: IpPrefix = "10.1.0.0/16".parse().unwrap();
        assert_eq!(p.to_string(), "10.1.0.0/16");
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 1, 200, 3]);
        assert!(p.contains(false, &a));
        a[1] = 2;
        assert!(!p.contains(false, &a));
        assert!(!p.contains(true, &a));
        assert_eq!("2001:db8::/32".parse::<IpPrefix>().unwrap().len(), 32);
        assert_eq!("192.0.2.7".parse::<IpPrefix>().unwrap().len(), 32);
        assert_eq!(
            "0.0.0.0/0".parse::<IpPrefix>().unwrap(),
            IpPrefix::any(false)
        );
        assert_eq!(
            "10.0.0.1/8".parse::<IpPrefix>(),
            Err(PrefixError::HostBits {
                given: "10.0.0.1/8".into(),
                suggested: "10.0.0.0/8".parse().unwrap()
            })
        );
        assert!(matches!(
            "10.0.0.0/33".parse::<IpPrefix>(),
            Err(PrefixError::Length { max: 32, .. })
        ));
        assert!(matches!(
            "::/129".parse::<IpPrefix>(),
            Err(PrefixError::Length { max: 128, .. })
        ));
        assert!(matches!(
            "nonsense/8".parse::<IpPrefix>(),
            Err(PrefixError::Address { .. })
        ));
        let p: IpPrefix = "2001:db8:8000::/33".parse().unwrap();
        let mut b = [0u8; 16];
        b[..5].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0x80]);
        assert!(p.contains(true, &b));
        b[4] = 0x7f;
        assert!(!p.contains(true, &b));
    }

    #[test]
    fn the_constructors_keep_the_invariant() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 1, 2, 3]);
        // Host bits set: refused by `new`, dropped by `covering`.
        assert!(matches!(
            IpPrefix::new(false, a, 8),
            Err(PrefixError::HostBits { .. })
        ));
        let p = IpPrefix::covering(false, &a, 8).unwrap();
        assert_eq!(p.to_string(), "10.0.0.0/8");
        assert_eq!(IpPrefix::new(false, *p.addr(), 8), Ok(p));
        // A length past the family's, either way.
        assert!(IpPrefix::new(false, [0; 16], 33).is_err());
        assert!(IpPrefix::covering(false, &a, 33).is_err());
        // IPv4 keeps its bytes 4.. zero.
        let mut tail = [0u8; 16];
        tail[9] = 1;
        assert!(IpPrefix::new(false, tail, 32).is_err());
        assert!(IpPrefix::new(true, tail, 80).is_ok());
    }
}
