//! IP prefixes (`10.0.0.0/8`, `2001:db8::/32`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A network prefix with its host bits cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    pub v6: bool,
    pub addr: [u8; 16],
    pub len: u8,
}

impl IpPrefix {
    pub fn max_len(v6: bool) -> u8 {
        if v6 {
            128
        } else {
            32
        }
    }

    /// Keeps the first `len` bits of `addr` (IPv4 uses the first 4 bytes).
    #[inline]
    pub fn mask(v6: bool, addr: &[u8; 16], len: u8) -> [u8; 16] {
        let mut out = [0u8; 16];
        let bytes = if v6 { 16 } else { 4 };
        let full = usize::from(len / 8);
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

/// Why a prefix string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixError(pub String);

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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
        let ip: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| PrefixError(format!("'{a}' is not an IPv4 or IPv6 address")))?;
        let v6 = ip.is_ipv6();
        let max = Self::max_len(v6);
        let len = match l {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| PrefixError(format!("prefix length '{l}' must be 0..={max}")))?,
        };
        let mut addr = [0u8; 16];
        match ip {
            IpAddr::V4(v) => addr[..4].copy_from_slice(&v.octets()),
            IpAddr::V6(v) => addr = v.octets(),
        }
        let masked = Self::mask(v6, &addr, len);
        if masked != addr {
            return Err(PrefixError(format!(
                "'{s}' has host bits set (did you mean {}/{len}?)",
                IpPrefix {
                    v6,
                    addr: masked,
                    len
                }
                .addr_string()
            )));
        }
        Ok(IpPrefix { v6, addr, len })
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
        assert_eq!("2001:db8::/32".parse::<IpPrefix>().unwrap().len, 32);
        assert_eq!("192.0.2.7".parse::<IpPrefix>().unwrap().len, 32);
        assert_eq!("0.0.0.0/0".parse::<IpPrefix>().unwrap().len, 0);
        assert!("10.0.0.1/8"
            .parse::<IpPrefix>()
            .unwrap_err()
            .0
            .contains("10.0.0.0/8"));
        assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
        assert!("::/129".parse::<IpPrefix>().is_err());
        assert!("nonsense/8".parse::<IpPrefix>().is_err());
        let p: IpPrefix = "2001:db8:8000::/33".parse().unwrap();
        let mut b = [0u8; 16];
        b[..5].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0x80]);
        assert!(p.contains(true, &b));
        b[4] = 0x7f;
        assert!(!p.contains(true, &b));
    }
}
